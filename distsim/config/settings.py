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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.errors import ConfigError
from distsim.metrics.settings import MeasureWindow, TimelineWindow, measure_window, timeline_window

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class SimSettings:
    """Simulation controls that do not change the modelled system."""

    seed: int = 0
    horizon_us: int | None = None
    fast_forward: bool = True
    write_requests: bool = True
    window: MeasureWindow | None = None  # sim.warmup_s / measure_s; None: every request counts
    timeline: TimelineWindow | None = None  # sim.timeline and its window; None: no timeline.json


def sim_settings(cfg: DictConfig) -> SimSettings:
    """``seed`` and ``sim.*``."""
    seed = cfg.seed
    if seed is None or isinstance(seed, bool) or seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0 (got {seed!r})")
    h = cfg.sim.horizon_s
    if h is not None and not (h > 0 and math.isfinite(h)):
        raise ConfigError("sim.horizon_s", f"must be a finite number > 0, or null for no horizon (got {h!r})")
    horizon = None if h is None else int(round(h * 1e6))
    window, horizon = measure_window(cfg.sim, horizon)  # a drain sets the horizon
    timeline = timeline_window(cfg.sim, horizon)
    return SimSettings(int(seed), horizon, bool(cfg.sim.fast_forward), bool(cfg.sim.write_requests), window, timeline)
