"""The timeline's settings (``sim.timeline``, ``sim.timeline_start_s``, ``sim.timeline_end_s``), checked and typed.

Why a window: a long run's schedule is millions of steps, far more than a trace viewer opens; a user
debugging a schedule looks at a span of it. Times are seconds of simulated time from t=0, the clock
arrivals are timed on (as the measurement window's, distsim.config.window). What the timeline holds and how
the window cuts it: :mod:`distsim.metrics.timeline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim.config.validators import number
from distsim.errors import ConfigError, warn_config


@dataclass(frozen=True)
class TimelineWindow:
    """The span of simulated time the timeline keeps: ``[start_us, end_us)``; ``end_us`` None: to the end."""

    start_us: int = 0
    end_us: int | None = None


def timeline_window(sim: Any, horizon_us: int | None) -> TimelineWindow | None:
    """The timeline's window when ``sim.timeline`` is on, else None. The window's keys are checked either
    way (a bad value is a mistake whether or not the timeline is on); each mistake is one ConfigError naming
    its key."""
    on = sim.timeline
    if not isinstance(on, bool):
        raise ConfigError("sim.timeline", f"must be true or false (got {on!r})")
    if sim.timeline_start_s is None:
        raise ConfigError("sim.timeline_start_s", "must be a number of seconds >= 0 (got null; 0 is the start of the run)")
    start = int(round(number("sim.timeline_start_s", sim.timeline_start_s, low=0.0) * 1e6))
    end = None
    if sim.timeline_end_s is not None:
        end = int(round(number("sim.timeline_end_s", sim.timeline_end_s, low=0.0) * 1e6))
        if end <= start:
            raise ConfigError(
                "sim.timeline_end_s", f"must be after sim.timeline_start_s ({start / 1e6:g} s), got {sim.timeline_end_s!r}"
            )
    if horizon_us is not None and start >= horizon_us:
        raise ConfigError(
            "sim.timeline_start_s", f"is at or after the end of the run ({horizon_us / 1e6:g} s): the timeline would be empty"
        )
    if not on:
        if start or end is not None:
            key = "sim.timeline_start_s" if start else "sim.timeline_end_s"
            warn_config(key, "has no effect without sim.timeline=true")
        return None
    return TimelineWindow(start, end)
