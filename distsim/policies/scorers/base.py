"""The scorer interface. A new scorer is one file with ``@SCORERS.register("name")`` (see registry.py)."""

from __future__ import annotations

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


def inverse_minmax(values: np.ndarray) -> np.ndarray:
    """1 for the smallest value, 0 for the largest, linear between; all 1 when all are equal."""
    lo = values[values.argmin()]  # min() and max(), exactly (the first extreme; NaN if any), cheaper
    span = values[values.argmax()] - lo
    if span == 0:
        return np.ones(values.size, dtype=np.float64)
    return 1.0 - (values - lo) / span
