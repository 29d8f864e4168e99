"""The simulation's own controls (``seed`` and ``sim.*``), checked into :class:`SimSettings`.

Each feature checks its own config section into frozen settings in its own package (distsim.cluster.settings,
distsim.cells.settings, distsim.policies.settings, distsim.autoscale.settings, distsim.runtime.settings,
distsim.metrics.settings, distsim.workload.settings; the engines and pools: distsim.cluster.checks and
distsim.cluster.pools), from the small validators of :mod:`distsim.validators`; :func:`distsim.resolve.resolve`
composes them. This module holds what belongs to no feature: the seed, the horizon, and the measurement and
timeline windows the metrics define (distsim.metrics.settings), which a drain and the horizon tie together.
Everything is immutable, so a resolved Scenario can be shared, pickled to a Ray worker, and reused for many seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import islice
from typing import TYPE_CHECKING

from distsim.errors import ConfigError
from distsim.metrics.settings import MeasureWindow, TimelineWindow, measure_window, timeline_window

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.request import Request


@dataclass(frozen=True)
class SimSettings:
    """Simulation controls that do not change the modelled system."""

    seed: int = 0
    horizon_us: int | None = None
    fast_forward: bool = True
    write_requests: bool = True
    window: MeasureWindow | None = None  # sim.warmup_s / measure_s; None: every request counts
    timeline: TimelineWindow | None = None  # sim.timeline and its window; None: no timeline.json


def _horizon_us(sim: DictConfig) -> int | None:
    h = sim.horizon_s
    if h is not None and not (h > 0 and math.isfinite(h)):
        raise ConfigError("sim.horizon_s", f"must be a finite number > 0, or null for no horizon (got {h!r})")
    return None if h is None else int(round(h * 1e6))


def sim_settings(cfg: DictConfig) -> SimSettings:
    """``seed`` and ``sim.*``. With ``sim.warmup_requests`` the window's start waits for the workload
    (:func:`with_request_warmup`)."""
    seed = cfg.seed
    if seed is None or isinstance(seed, bool) or seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0 (got {seed!r})")
    window, horizon = measure_window(cfg.sim, _horizon_us(cfg.sim))  # a drain sets the horizon
    timeline = timeline_window(cfg.sim, horizon)
    return SimSettings(int(seed), horizon, bool(cfg.sim.fast_forward), bool(cfg.sim.write_requests), window, timeline)


def with_request_warmup(cfg: DictConfig, sim: SimSettings, requests: Iterable[Request]) -> SimSettings:
    """``sim`` with the window of ``sim.warmup_requests`` = N: it starts at the arrival of request N (the
    first that counts, in arrival order), its length and drain from there. Needs the arrival times before
    the run, so a source that sends as the run goes (closed-loop clients, sessions) is refused."""
    if sim.window is None or not sim.window.first_request:
        return sim
    n = sim.window.first_request
    if getattr(requests, "driven", False):
        raise ConfigError("sim.warmup_requests", "needs the arrival times before the run, but this workload sends "
                          "requests as the run goes (closed-loop clients or sessions): warm up by time (sim.warmup_s)")
    first = next(islice(iter(requests), n, None), None)
    if first is None:
        raise ConfigError("sim.warmup_requests", f"is {n}, but the workload has no more than {n} requests: none would count")
    window, horizon = measure_window(cfg.sim, _horizon_us(cfg.sim), first.arrival_us)
    return replace(sim, window=window, horizon_us=horizon)
