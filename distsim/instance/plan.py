"""The step, or run of decode-only steps, that an instance has in flight.

One event marks the end of a plan. A single step may hold prefill chunks and decoders; a fast-forwarded
run holds decoders only, with the end time of each of its steps (from the latency model, planned up to
the run's earliest possible end). A run can be cut short at a step boundary (an arrival could join) or
settled at the horizon: both are a bisection of those end times.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import MutableSequence
from dataclasses import dataclass, field
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
    ends_us: MutableSequence[int] | None = None  # a fast-forwarded run: each planned step's end time (a list,
    # or an array("q") for a long run: distsim.instance.latency.base.LatencyModel.decode_run_ends; None: not a run)

    def step(self, start: int, begin_us: int, decoders: int, chunks: list[tuple[Request, int]], dur_us: int) -> None:
        """Plan one step."""
        self.start = start
        self.begin_us = begin_us
        self.decoders = decoders
        self.chunks = chunks
        self.dur_us = dur_us
        self.steps = 1
        self.end_us = begin_us + dur_us

    def run(self, start: int, begin_us: int, decoders: int, ends_us: MutableSequence[int]) -> None:
        """Plan a run of decode-only steps ending at ``ends_us`` (not empty)."""
        self.start = start
        self.begin_us = begin_us
        self.decoders = decoders
        self.chunks = []
        self.steps = len(ends_us)
        self.ends_us = ends_us
        self.end_us = ends_us[-1]

    @property
    def durations_us(self) -> list[int] | None:
        """A run's step durations (None for a single step); for checks, not the hot path."""
        ends = self.ends_us
        if ends is None:
            return None
        return [end - begin for begin, end in zip([self.begin_us, *ends], ends)]

    def cut(self, now: int, lag: int = 0) -> bool:
        """End the run at the first step boundary at or after ``now`` (``lag`` 1: at the one after it, unless
        ``now`` is the run's start; async scheduling); False when that is its end anyway."""
        idx = bisect_left(self.ends_us, now)
        if lag and now > self.begin_us:
            idx += 1
        if idx >= self.steps - 1:
            return False
        self.steps = idx + 1
        self.end_us = self.ends_us[idx]
        return True

    def last_begin_us(self) -> int:
        """When the plan's last step began (the run's last, for a fast-forwarded run)."""
        if self.ends_us is None or self.steps == 1:
            return self.begin_us
        return self.ends_us[self.steps - 2]

    def keep_ended_by(self, horizon_us: int) -> bool:
        """Keep only the run's steps that end by ``horizon_us``; False when none does."""
        ends = self.ends_us
        k = bisect_right(ends, horizon_us)
        if k == 0:
            return False
        self.steps = min(k, self.steps)
        self.end_us = ends[self.steps - 1]
        return True

    def steps_started_after_first(self, now: int) -> int:
        """How many of the run's steps after its first have started by ``now``. A step starts (and takes
        its blocks) when the one before it ends; a read at that very instant comes before it."""
        if self.ends_us is None or self.steps <= 1:
            return 0
        return min(bisect_left(self.ends_us, now), self.steps - 1)
