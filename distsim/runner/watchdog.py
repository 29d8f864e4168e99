"""When a job on a live Ray actor counts as lost: a wall-clock bound on each attempt.

A call to a live actor can fail to come back (a worker stuck in a system call, a result Ray never
delivers); ``ray.wait`` would then wait forever while the other workers sit idle. The pool asks the
watchdog for each in-flight job's bound; a job past it has its actor killed and replaced and is
resubmitted, and after ``runner.max_retries`` re-runs it fails with one line naming it and the bound.

The bound is ``runner.job_timeout_s`` when set. Null derives it from the sweep itself, since job sizes
differ by orders of magnitude between sweeps but hardly between the seeds of one configuration:
``K`` times the slowest finished job of the same configuration, and at least ``FLOOR_S``; while none of
that configuration has finished, ``FIRST_S`` (a job longer than that needs an explicit setting). An
attempt's clock starts when its actor is ready; start-up (seconds on a fresh Ray, longer while a cluster
waits for resources) has its own bound, ``START_S``: a job whose actor has not started by then is lost the
same way (its actor replaced, the job resubmitted), so a sweep never waits for ever on an actor Ray cannot
place. An actor that fails to start fails its call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

K = 10.0
FLOOR_S = 60.0
FIRST_S = 3600.0
START_S = 900.0  # an actor's start: Ray's placement (a cluster may be scaling up) and the worker's imports
KEY = "runner.job_timeout_s"


@dataclass
class Watchdog:
    timeout_s: float | None = None  # runner.job_timeout_s; None: derived per configuration
    slowest: dict[str, float] = field(default_factory=dict)  # config key -> slowest finished attempt, s

    def finished(self, config_key: str, elapsed_s: float) -> None:
        """Record a returned attempt's duration (as the driver timed it)."""
        self.slowest[config_key] = max(self.slowest.get(config_key, 0.0), elapsed_s)

    def bound_s(self, config_key: str) -> float:
        """How long an attempt of a job of ``config_key`` may run before it counts as lost."""
        if self.timeout_s is not None:
            return float(self.timeout_s)
        if config_key not in self.slowest:
            return FIRST_S
        return max(FLOOR_S, K * self.slowest[config_key])

    def describe(self, config_key: str) -> str:
        """The bound as a user reads it: the value and where it comes from."""
        bound = self.bound_s(config_key)
        origin = KEY if self.timeout_s is not None else f"{KEY}=null: derived from the sweep's finished jobs"
        return f"{bound:g} s ({origin})"
