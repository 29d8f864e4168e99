"""The metrics' settings, checked and typed (resolve, then build): which number a run gives (``fitness``),
which requests count (the measurement window, ``sim.warmup_s``, ``sim.measure_s``, ``sim.drain_s``), and what
span of the schedule timeline.json keeps (``sim.timeline``, ``sim.timeline_start_s``, ``sim.timeline_end_s``).

The measurement window. Why: a run that starts on an empty cluster flatters its first requests (no queue,
cold but uncontended caches), and the last ones see the load fall away; steady-state figures count only requests that arrive
once the system has warmed up, and stop counting before the tail. Times are seconds of simulated time
from t=0, the clock arrivals are timed on (a synthetic workload starts there; a trace's first row is
moved there), so the window does not move when the first request happens to arrive late.

A request counts (is *measured*) when it arrives in ``[warmup_s, warmup_s + measure_s)``; measure_s
null leaves the window open to the end of the run. Arrivals go on after the window, so the measured
requests finish under a realistic load. ``drain_s`` stops the run that long after the window ends (it
becomes the horizon); measured requests still in flight then are unfinished. How the window applies to
each figure is :mod:`distsim.metrics.window`'s business.

The timeline's window. Why a window: a long run's schedule is millions of steps, far more than a trace
viewer opens; a user debugging a schedule looks at a span of it. Times are seconds of simulated time from
t=0, as the measurement window's. What the timeline holds and how the window cuts it:
:mod:`distsim.timeline.trace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from distsim.errors import ConfigError, warn_config
from distsim.metrics.fitness import FITNESS, check_fitness
from distsim.provenance import user_set
from distsim.validators import number, warn_unread

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class FitnessSettings:
    """One number per run (distsim.metrics.fitness): ``kind`` goodput (``per`` gpu, dollar or none),
    capacity (as goodput, with the ``share`` of requests that must meet their SLOs, the bisection's
    relative ``tolerance``, its ``max_steps`` and ``stop_early``, whether a trial that cannot meet the share
    stops) or weighted (metric ``weights`` and reference values ``refs``)."""

    kind: str = "goodput"
    per: str = "gpu"
    weights: dict[str, float] = field(default_factory=dict)
    refs: dict[str, float] = field(default_factory=dict)
    share: float = 0.9
    tolerance: float = 0.02
    max_steps: int = 10
    stop_early: bool = True


def fitness(cfg: DictConfig) -> FitnessSettings:
    """``fitness.*``, checked against the fitness form's own rules (distsim.metrics.fitness)."""
    FITNESS.get(cfg.kind)
    own = {"goodput": ("kind", "per"), "weighted": ("kind", "weights", "refs"),
           "capacity": ("kind", "per", "share", "tolerance", "max_steps", "stop_early")}  # fmt: skip
    if cfg.kind in own:
        warn_unread(cfg, "fitness", own[cfg.kind], f"the fitness {cfg.kind!r} does not use it", FitnessSettings())
    settings = FitnessSettings(str(cfg.kind), str(cfg.per), dict(cfg.weights or {}), dict(cfg.refs or {}),
                               cfg.get("share", 0.9), cfg.get("tolerance", 0.02), cfg.get("max_steps", 10),
                               cfg.get("stop_early", True))
    check_fitness(settings)
    return settings


@dataclass(frozen=True)
class MeasureWindow:
    """Requests arriving in ``[start_us, end_us)`` count; ``end_us`` None: to the end of the run. Warm-up by
    request count (``sim.warmup_requests``): the first ``first_request`` requests by arrival do not count
    either, and ``start_us`` is the arrival of the first that does (so the fleet figures start there)."""

    start_us: int = 0
    end_us: int | None = None
    first_request: int = 0


def _us(key: str, value: object, *, zero_ok: bool) -> int:
    """Seconds (a finite number, > 0, or >= 0 when ``zero_ok``) as integer microseconds."""
    if value is None:
        raise ConfigError(key, "must be a number of seconds (got null)")
    seconds = number(key, value, low=0.0, strict=not zero_ok)
    us = int(round(seconds * 1e6))
    if us == 0 and not zero_ok:
        raise ConfigError(key, f"must be at least 1 microsecond (got {value!r})")
    return us


def warmup_requests(sim: DictConfig) -> int:
    """``sim.warmup_requests``: an integer >= 0 (0: off), not beside ``sim.warmup_s`` (one warm-up rule)."""
    value = sim.warmup_requests
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError("sim.warmup_requests", f"must be an integer >= 0 (got {value!r})")
    if value and sim.warmup_s:
        raise ConfigError("sim.warmup_requests", f"and sim.warmup_s ({sim.warmup_s!r}) are both set: warm up by request count or by time, not both")
    return value


def measure_window(
    sim: DictConfig, horizon_us: int | None, first_measured_us: int = 0
) -> tuple[MeasureWindow | None, int | None]:
    """The window ``sim.*`` configures (None with the defaults: every request counts) and the run's
    horizon (``sim.horizon_s``, or the end of the drain). With ``sim.warmup_requests`` the window starts at
    ``first_measured_us``, the arrival of the first request that counts (0 until the workload is known:
    distsim.config.settings.with_request_warmup). Each mistake is one ConfigError naming its key."""
    skip = warmup_requests(sim)
    if skip:
        window, horizon_us = measure_window_from(sim, horizon_us, first_measured_us)
        window = replace(window or MeasureWindow(), first_request=skip)
        if horizon_us is not None and horizon_us <= window.start_us:
            raise ConfigError("sim.horizon_s", f"stops the run at {horizon_us / 1e6:g} s, by the arrival of the first "
                              f"request after sim.warmup_requests ({window.start_us / 1e6:g} s): nothing would count")
        return window, horizon_us
    return measure_window_from(sim, horizon_us, _us("sim.warmup_s", sim.warmup_s, zero_ok=True))


def measure_window_from(sim: DictConfig, horizon_us: int | None, start: int) -> tuple[MeasureWindow | None, int | None]:
    """The window from ``start`` (microseconds), its length and drain, checked against the horizon."""
    length = None if sim.measure_s is None else _us("sim.measure_s", sim.measure_s, zero_ok=False)
    drain = None if sim.drain_s is None else _us("sim.drain_s", sim.drain_s, zero_ok=True)
    if drain is not None and length is None:
        raise ConfigError("sim.drain_s", "needs sim.measure_s: the drain follows the end of the measurement window")
    if start == 0 and length is None:
        return None, horizon_us
    end = None if length is None else start + length
    if drain is not None:
        stop = end + drain
        if horizon_us is not None and horizon_us != stop:
            raise ConfigError(
                "sim.drain_s",
                f"stops the run at sim.warmup_s + sim.measure_s + sim.drain_s = {stop / 1e6:g} s, but sim.horizon_s"
                f" is {horizon_us / 1e6:g} s: set one of them, or make them agree",
            )
        return MeasureWindow(start, end), stop
    if horizon_us is not None and end is not None and horizon_us < end:
        raise ConfigError(
            "sim.horizon_s",
            f"stops the run at {horizon_us / 1e6:g} s, before the measurement window ends"
            f" (sim.warmup_s + sim.measure_s = {end / 1e6:g} s)",
        )
    if horizon_us is not None and horizon_us <= start:
        raise ConfigError(
            "sim.horizon_s", f"stops the run at {horizon_us / 1e6:g} s, by the end of sim.warmup_s ({start / 1e6:g} s): nothing would count"
        )
    return MeasureWindow(start, end), horizon_us


@dataclass(frozen=True)
class TimelineWindow:
    """The span of simulated time the timeline keeps: ``[start_us, end_us)``; ``end_us`` None: to the end."""

    start_us: int = 0
    end_us: int | None = None


def timeline_window(sim: DictConfig, horizon_us: int | None) -> TimelineWindow | None:
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
        key = "sim.timeline_start_s" if start else "sim.timeline_end_s"
        if (start or end is not None) and user_set(key):
            warn_config(key, "has no effect without sim.timeline=true")
        return None
    return TimelineWindow(start, end)
