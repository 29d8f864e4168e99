"""The search's progress line, one per generation on stdout:

    search: generation 3/10  best training score +0.0312  jobs 240/800 (80 resumed)  elapsed 1:02  ETA 3:10

``best ...`` is whatever the loop reports (a scalar search its best score, a Pareto search its front).
The ETA counts the generations left and the held-out jobs after them at this run's own speed: jobs a
resumed run found on disk took no time and do not count as speed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import pandas as pd

from distsim.progress import clock


def resumed_jobs(results: pd.DataFrame) -> int:
    """How many of a sweep's jobs were found on disk (distsim.search.evaluate records it)."""
    return int(results.attrs.get("resumed", 0))


@dataclass
class SearchProgress:
    generations: int
    jobs_per_generation: int
    later_jobs: int = 0  # held-out jobs that run after the last generation
    echo: bool = True
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    clock_fn: Callable[[], float] = time.perf_counter
    done: int = 0  # generations finished
    resumed: int = 0  # jobs found on disk
    busy_s: float = 0.0  # wall time of the generations that simulated something
    _t0: float = field(default=0.0)
    _last: float = field(default=0.0)

    def __post_init__(self) -> None:
        self._t0 = self._last = self.clock_fn()

    def line(self, summary: str) -> str:
        jobs = self.done * self.jobs_per_generation
        total = self.generations * self.jobs_per_generation
        simulated = jobs - self.resumed
        left = total - jobs + self.later_jobs
        eta = clock(self.busy_s / simulated * left) if simulated > 0 else "?"
        resumed = f" ({self.resumed} resumed)" if self.resumed else ""
        return (
            f"search: generation {self.done}/{self.generations}  {summary}  jobs {jobs}/{total}{resumed}  "
            f"elapsed {clock(self._last - self._t0)}  ETA {eta}"
        )

    def note(self, text: str) -> str:
        """A line before the first generation ends (what runs now), so a long generation is not silent."""
        line = f"search: {text}  elapsed {clock(self.clock_fn() - self._t0)}"
        if self.echo:
            print(line, file=self.stream, flush=True)
        return line

    def generation_done(self, summary: str, *, resumed: int = 0) -> str:
        """Count one finished generation (``resumed`` of its jobs were on disk) and print its line."""
        now = self.clock_fn()
        if resumed < self.jobs_per_generation:
            self.busy_s += now - self._last
        self._last = now
        self.done += 1
        self.resumed += resumed
        text = self.line(summary)
        if self.echo:
            print(text, file=self.stream, flush=True)
        return text
