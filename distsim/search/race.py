"""Racing (successive halving) within a generation: every candidate first runs a short race (the first
``first_seeds`` training seeds, with the ``first`` overrides, e.g. a coarser capacity tolerance); only the
best ``keep`` share goes on to the full evaluation (every training seed, the scenario as configured).

Why: most candidates of a generation are clearly worse than its best, and a full capacity evaluation of
each costs seeds x bisection steps. The budget goes where decisions are close. The optimiser ranks by
what it is told, so a raced-out candidate is told a value below every survivor's, in its race order:
the ranking the race decided. Only fully evaluated candidates can be the search's best.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distsim.errors import ConfigError


@dataclass(frozen=True)
class RaceSettings:
    keep: float | None = None  # share of a generation that survives the race; null: no race
    first_seeds: int = 1  # training seeds of the race (the first of search.train_seeds)
    first: tuple[str, ...] = ()  # overrides of the race's runs (cheaper ones: fitness.tolerance=0.02)

    @classmethod
    def from_node(cls, node: Mapping | None) -> RaceSettings:
        if not node:
            return cls()
        node = dict(node)
        unknown = set(node) - {"keep", "first_seeds", "first"}
        if unknown:
            raise ConfigError(f"search.race.{sorted(unknown)[0]}", "unknown key (keep, first_seeds, first)")
        first = node.get("first") or ()
        first = tuple(first.split()) if isinstance(first, str) else tuple(str(x) for x in first)
        return cls(node.get("keep"), int(node.get("first_seeds", 1)), first)

    @property
    def on(self) -> bool:
        return self.keep is not None

    def check(self, train_seeds: int) -> None:
        if self.keep is not None and not (isinstance(self.keep, (int, float)) and 0 < self.keep < 1):
            raise ConfigError("search.race.keep", f"must be in (0, 1) or null (got {self.keep!r})")
        if self.on and not 1 <= self.first_seeds <= train_seeds:
            raise ConfigError("search.race.first_seeds", f"must be 1 to {train_seeds} (the training seeds)")
        for o in self.first:
            if o.split("=")[0].lstrip("+~").split(".")[0] in ("policy", "search", "seed", "runner"):
                raise ConfigError("search.race.first", f"{o}: the race changes the scenario or fitness, not {o.split('=')[0]}")


def survivors(scores: Sequence[float], keep: float) -> list[int]:
    """The indices of the best ``keep`` share (at least 2, or all when fewer), best first; ties by index."""
    n = max(2, math.ceil(keep * len(scores)))
    order = sorted(range(len(scores)), key=lambda i: (-scores[i] if math.isfinite(scores[i]) else math.inf, i))
    return order[: min(n, len(scores))]


def told(race_scores: Sequence[float], full_scores: Mapping[int, float]) -> list[float]:
    """What the optimiser is told: a survivor its full score; a raced-out candidate a value below every
    survivor's, lower the worse its race, so the race's order is kept."""
    floor = min([s for s in full_scores.values() if math.isfinite(s)] or [-1e9])
    out_order = sorted((i for i in range(len(race_scores)) if i not in full_scores),
                       key=lambda i: (-race_scores[i] if math.isfinite(race_scores[i]) else math.inf, i))  # fmt: skip
    rank = {i: r for r, i in enumerate(out_order)}
    return [full_scores[i] if i in full_scores else floor - 1e-3 * (1 + rank[i]) for i in range(len(race_scores))]
