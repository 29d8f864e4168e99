"""Deterministic choice helpers shared by routers: arg-min/arg-max with a seeded tie-break.

Ties are broken uniformly at random from the router's own stream, drawn only when there is a tie,
so the result depends on the seed alone (and "first index wins" never herds onto instance 0).
Values are 1-D vectors over the candidates. The extreme is found with argmin/argmax, several times cheaper
than min/max on numpy's reduction path; with a NaN both name the first NaN, which ties with nothing.
"""

from __future__ import annotations

import numpy as np


def pick_min(values: np.ndarray, rng: np.random.Generator) -> int:
    first = int(values.argmin())  # the first smallest: its value is min()'s, at a fraction of the cost
    ties = (values == values[first]).nonzero()[0]
    if ties.size == 1:
        return first
    return int(ties[rng.integers(ties.size)])


def pick_max(values: np.ndarray, rng: np.random.Generator) -> int:
    first = int(values.argmax())
    ties = (values == values[first]).nonzero()[0]
    if ties.size == 1:
        return first
    return int(ties[rng.integers(ties.size)])


def load(view) -> np.ndarray:
    """Queue + running batch (instance-reported, maybe stale) + requests in transit (router-owned)."""
    return view.queue_depth() + view.running() + view.in_transit()
