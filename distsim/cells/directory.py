"""What the front (and a cell looking for a spill target) knows about the cells.

Each cell reports a summary, its outstanding requests (accepted into the cell and not yet finished), every
``summary_interval_us`` (each interval drawn uniformly within +-``summary_jitter_us`` from the
"cells/summaries" stream); the summary reaches the front ``summary_delay_us`` after it was taken. The
front counts the requests it (or a spilling cell) has sent each cell since that cell's last summary
arrived, and clears the count when a new one does: a summary taken before some of those requests reached
the cell undercounts them, which a real front cannot tell either. With ``summary_interval_us`` 0 the
summaries are the live counts and nothing is counted on the side.

Spill targets are chosen from the same knowledge (a simplification: one directory shared by the front and
the cells, as a gossip mesh would share it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distsim.cells.settings import CellSettings
from distsim.events.loop import PRIO_CLUSTER, EventLoop


class CellDirectory:
    def __init__(self, sizes: list[int], settings: CellSettings, loop: EventLoop, rng: np.random.Generator, rtt_us: np.ndarray):
        n = len(sizes)
        self.loop = loop
        self.rng = rng
        self.instances = np.asarray(sizes, dtype=np.float64)  # instances (engines) per cell
        self.rtt_us = rtt_us  # between nodes (cells, then the front)
        self.front_rtt_us = rtt_us[n, :n].copy()
        self.inside = [0] * n  # live: requests each cell has accepted and not finished (scalar reads and writes)
        self.reported = np.zeros(n, dtype=np.int64)  # the last summary of each cell to reach the front
        self.sent = np.zeros(n, dtype=np.int64)  # requests sent to each cell since that summary arrived
        self.live = settings.summary_interval_us == 0
        self.interval_us = settings.summary_interval_us
        self.jitter_us = settings.summary_jitter_us
        self.delay_us = settings.summary_delay_us
        threshold = settings.spill_threshold
        self.threshold = threshold
        # a cell is saturated when inside > capacity (outstanding per instance above the threshold)
        self.capacity = self.instances * threshold if threshold is not None else np.full(n, np.inf)
        self._capacity = self.capacity.tolist()
        self.summaries = 0
        self._active: Callable[[], bool] = lambda: True

    # ---------------------------------------------------------------- what the front reads
    def outstanding(self) -> np.ndarray:
        """Outstanding requests per cell as the summaries report them (live when the interval is 0)."""
        return np.array(self.inside, dtype=np.int64) if self.live else self.reported

    def estimated_load(self) -> np.ndarray:
        """Outstanding requests per instance: the summary's count plus the requests sent since."""
        return (self.outstanding() + self.sent) / self.instances

    def reported_saturated(self) -> np.ndarray:
        """The cells whose last summary shows them saturated."""
        return self.outstanding() > self.capacity

    def note_sent(self, cell: int) -> None:
        if not self.live:
            self.sent[cell] += 1

    # ---------------------------------------------------------------- what a cell knows of itself
    def saturated(self, cell: int) -> bool:
        """A cell's own live state: more outstanding requests per instance than the threshold."""
        return self.threshold is not None and self.inside[cell] > self._capacity[cell]

    def spill_target(self, src: int, visited: tuple[int, ...]) -> int | None:
        """The cell a saturated ``src`` passes a request on to: among the cells not yet visited that the
        directory estimates unsaturated (summary plus requests sent since), the least loaded per instance,
        then the nearest to ``src``, then the lowest number; None when there is none."""
        load = self.outstanding() + self.sent
        ok = load <= self.capacity
        ok[list(visited)] = False
        candidates = np.flatnonzero(ok)
        if candidates.size == 0:
            return None
        per = load[candidates] / self.instances[candidates]
        tied = candidates[per == per.min()]
        if tied.size == 1:
            return int(tied[0])
        return int(tied[np.argmin(self.rtt_us[src, tied])])

    # ---------------------------------------------------------------- summaries
    def start(self, active: Callable[[], bool]) -> None:
        """Begin each cell's summaries (unless live); they stop once ``active`` says the fleet is idle."""
        if self.live:
            return
        self._active = active
        for cell in range(len(self.inside)):
            self.loop.schedule(self._next(0), PRIO_CLUSTER, self._take, cell)

    def _next(self, now: int) -> int:
        interval = self.interval_us
        if self.jitter_us:
            interval += int(self.rng.integers(-self.jitter_us, self.jitter_us + 1))
        return now + max(interval, 1)

    def _take(self, now: int, cell: int) -> None:
        self.summaries += 1
        count = self.inside[cell]
        if self.delay_us:
            self.loop.schedule(now + self.delay_us, PRIO_CLUSTER, self._arrive, (cell, count))
        else:
            self._arrive(now, (cell, count))
        if self._active():
            self.loop.schedule(self._next(now), PRIO_CLUSTER, self._take, cell)

    def _arrive(self, now: int, item: tuple[int, int]) -> None:
        cell, count = item
        self.reported[cell] = count
        self.sent[cell] = 0
