"""Running and waiting request counts over time, from a request table.

A request counts as waiting from its arrival until the engine first schedules it, and as running from
then until its last token. Preemptions are invisible in a request table (a preempted request still
counts as running), which is why the plots also show the engine's own per-second series when the run
recorded one (vLLM's timeseries.csv counts a preempted request as waiting).
"""

from __future__ import annotations

import numpy as np


def occupancy(
    arrival_ms: np.ndarray, scheduled_ms: np.ndarray, completion_ms: np.ndarray, times_ms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(running, waiting) at each of ``times_ms``. NaN scheduled/completion times mean 'never'."""
    arrival = np.asarray(arrival_ms, dtype=np.float64)
    sched = np.nan_to_num(np.asarray(scheduled_ms, dtype=np.float64), nan=np.inf)
    done = np.nan_to_num(np.asarray(completion_ms, dtype=np.float64), nan=np.inf)
    t = np.asarray(times_ms, dtype=np.float64)

    def count_le(values: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.sort(values), t, side="right")

    started = count_le(sched)
    waiting = count_le(arrival) - started
    running = started - count_le(done)
    return running, waiting
