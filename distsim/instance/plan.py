"""The step, or run of decode-only steps, that an instance has in flight.

One event marks the end of a plan. A single step may hold prefill chunks and decoders; a fast-forwarded
run holds decoders only, with one duration per step. A run can be cut short at a step boundary (an
arrival could join) or settled at the horizon, so its step end times are computed when first needed.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.request import Request


@dataclass(slots=True, eq=False)
class StepPlan:
    """Steps ``[start, start + steps)`` of an instance, from ``begin_us`` to ``end_us``."""

    steps: int = 0  # 0: nothing in flight
    start: int = 0  # the instance's step index of the first step
    begin_us: int = 0
    end_us: int = 0
    dur_us: int = 0  # a single step's duration
    decoders: int = 0  # decoding requests in every step of the plan
    chunks: list[tuple[Request, int]] = field(default_factory=list)  # a single step's (request, prefill tokens)
    durations_us: list[int] | None = None  # a fast-forwarded run: each step's duration
    ends_us: list[int] | None = None  # a run's step end times, computed on demand

    def step(self, start: int, begin_us: int, decoders: int, chunks: list[tuple[Request, int]], dur_us: int) -> None:
        """Plan one step."""
        self.start = start
        self.begin_us = begin_us
        self.decoders = decoders
        self.chunks = chunks
        self.dur_us = dur_us
        self.steps = 1
        self.end_us = begin_us + dur_us

    def run(self, start: int, begin_us: int, decoders: int, durations_us: list[int]) -> None:
        """Plan a run of decode-only steps."""
        self.start = start
        self.begin_us = begin_us
        self.decoders = decoders
        self.chunks = []
        self.steps = len(durations_us)
        self.durations_us = durations_us
        self.ends_us = None
        self.end_us = begin_us + sum(durations_us)

    def run_ends(self) -> list[int]:
        """End times of the run's steps."""
        if self.ends_us is None:
            ends = list(accumulate(self.durations_us, initial=self.begin_us))
            del ends[0]
            self.ends_us = ends
        return self.ends_us

    def cut(self, now: int) -> bool:
        """End the run at the first step boundary at or after ``now``; False when that is its end anyway."""
        ends = self.run_ends()
        idx = bisect_left(ends, now)
        if idx >= self.steps - 1:
            return False
        self.steps = idx + 1
        self.end_us = ends[idx]
        return True

    def keep_ended_by(self, horizon_us: int) -> bool:
        """Keep only the run's steps that end by ``horizon_us``; False when none does."""
        ends = self.run_ends()
        k = bisect_right(ends, horizon_us)
        if k == 0:
            return False
        self.steps = min(k, self.steps)
        self.end_us = ends[self.steps - 1]
        return True

    def steps_started_after_first(self, now: int) -> int:
        """How many of the run's steps after its first have started by ``now``. A step starts (and takes
        its blocks) when the one before it ends; a read at that very instant comes before it."""
        if self.durations_us is None or self.steps <= 1:
            return 0
        return min(bisect_left(self.run_ends(), now), self.steps - 1)
