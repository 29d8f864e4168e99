"""Deterministic choice helpers shared by routers: arg-min/arg-max with a seeded tie-break.

Ties are broken uniformly at random from the router's own stream, drawn only when there is a tie,
so the result depends on the seed alone (and "first index wins" never herds onto instance 0).
"""

from __future__ import annotations

import numpy as np


def pick_min(values: np.ndarray, rng: np.random.Generator) -> int:
    best = values.min()
    ties = np.flatnonzero(values == best)
    if ties.size == 1:
        return int(ties[0])
    return int(ties[rng.integers(ties.size)])


def pick_max(values: np.ndarray, rng: np.random.Generator) -> int:
    best = values.max()
    ties = np.flatnonzero(values == best)
    if ties.size == 1:
        return int(ties[0])
    return int(ties[rng.integers(ties.size)])


def load(view) -> np.ndarray:
    """Queue + running batch (instance-reported, maybe stale) + requests in transit (router-owned)."""
    return view.queue_depth() + view.running() + view.in_transit()
