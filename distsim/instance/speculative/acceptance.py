"""How many drafted tokens the target accepts: a per-position acceptance profile.

Position j of a draft is accepted with probability ``p_j`` given that positions 1 .. j-1 were (the chain
rejection sampler stops at the first rejection), so a step of k drafts yields ``1 + J`` tokens where J is
the accepted prefix: the target's own token (the correction or the bonus) always comes out. With an
i.i.d. rate a (every ``p_j = a``), E[1 + J] = (1 - a^(k+1)) / (1 - a) (Leviathan et al., 2023, eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Acceptance:
    """Conditional acceptance probability of each draft position, first position first."""

    profile: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.profile)

    def expected_tokens(self, k: int | None = None) -> float:
        """E[tokens out of one verify step] with ``k`` drafts (all of them by default)."""
        k = self.k if k is None else k
        return 1.0 + float(np.cumprod(self.profile[:k]).sum()) if k else 1.0

    def draw(self, rng: np.random.Generator, drafts: np.ndarray) -> np.ndarray:
        """Tokens out of one verify step for sequences with ``drafts`` drafted tokens each (<= k): one
        uniform per sequence and position, the accepted prefix cut at each sequence's own draft length."""
        k = self.k
        ok = rng.random((len(drafts), k)) < np.asarray(self.profile)
        accepted = np.cumprod(ok, axis=1).sum(axis=1)
        return 1 + np.minimum(accepted, drafts)
