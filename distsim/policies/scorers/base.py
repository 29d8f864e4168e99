"""The scorer interface. A new scorer is one file with ``@SCORERS.register("name")`` (see registry.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from distsim.policies.scorers.registry import SCORERS  # noqa: F401  (re-exported: scorers register here)
from distsim.request import Request

if TYPE_CHECKING:
    from distsim.policies.session_affinity import LoadGuardParams
    from distsim.signals.view import ClusterView


class Scorer:
    reads_signals = False  # reads instance-reported signals (so live reads need pushes)

    def __init__(self, params: LoadGuardParams):
        self.params = params  # the weighted router's parameters (distsim.policies.weighted), of which scorers read load_guard

    def score(self, req: Request, view: ClusterView) -> np.ndarray:
        raise NotImplementedError

    def bound(self, req: Request, view: ClusterView) -> tuple[np.ndarray | float, Loose | None]:
        """Scores (a vector over the candidates, or one float for all) at least the true ones, with the
        positions where they may exceed them (None: exact everywhere). For a scorer whose exact scores
        cost work per candidate: the router makes exact only the positions that could win."""
        return self.score(req, view), None


class Loose:
    """Where a scorer's bound may exceed its true score, and the true score there."""

    def exact(self, position: int) -> float | None:
        """The true score at ``position``, or None when the bound there is exact."""
        raise NotImplementedError

    def among(self, positions: np.ndarray) -> np.ndarray:
        """Those of ``positions`` (ascending) whose bound may exceed the true score."""
        raise NotImplementedError

    def positions(self) -> np.ndarray:
        """Every position whose bound may exceed the true score (ascending)."""
        raise NotImplementedError


def guard_load(scores: np.ndarray, view: ClusterView, guard: float) -> np.ndarray:
    """``scores`` with 0 where an instance has more than ``guard`` outstanding requests above the least
    loaded (the affinity scorers' load guard, so one warm instance cannot pull all traffic), in place."""
    outstanding = view.outstanding()
    limit = outstanding[outstanding.argmin()] + guard
    if not math.isinf(limit):
        # counts above the float limit are those above its floor: an integer comparison, cheaper
        scores[outstanding > math.floor(limit)] = 0.0
    return scores


def inverse_minmax(values: np.ndarray) -> np.ndarray:
    """1 for the smallest value, 0 for the largest, linear between; all 1 when all are equal."""
    scores = inverse_minmax_or_one(values)
    return np.ones(values.size, dtype=np.float64) if isinstance(scores, float) else scores


def inverse_minmax_or_one(values: np.ndarray) -> np.ndarray | float:
    """:func:`inverse_minmax`, or the float 1.0 when all values are equal (no vector to build)."""
    lo = values[values.argmin()]  # min() and max(), exactly (the first extreme; NaN if any), cheaper
    span = values[values.argmax()] - lo
    if span == 0:
        return 1.0
    return 1.0 - (values - lo) / span


def as_vector(scores: np.ndarray | float, n: int) -> np.ndarray:
    """A bound's scores as a vector over the ``n`` candidates."""
    return np.full(n, scores, dtype=np.float64) if isinstance(scores, float) else scores
