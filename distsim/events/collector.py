"""Python's cyclic garbage collector, run less often while the events run.

Why: the event loop allocates millions of short-lived objects (event tuples, requests, numpy temporaries)
that reference counting frees on its own; the cycle collector only has the few cycles to find. At its
default thresholds (700, 10, 10) it starts a collection every 700 net allocations and, as the world and
the recorded requests grow, full collections over every live object: 15-20% of a run's CPU at 1,000
instances. Collections every 50,000 allocations, and full ones rarely, keep the same memory (cycles
still go, later) at a fraction of the cost. Nothing the simulation computes depends on when they run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

THRESHOLDS = (50_000, 20, 100)  # young collections per allocations, then per young, then per middle


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds for the block; the caller's come back after it."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
