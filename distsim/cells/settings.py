"""The cell layer's settings (``cluster.cells.*``), checked and typed (resolve, then build: distsim.cells.build).

Every pool's instances are split equally among the cells; the front router is a registered class
(distsim.cells.registry); the summaries' cadence and delay, the network's scales and the spill-over rule
come with their units in their names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.cells.registry import FRONTS
from distsim.errors import ConfigError, warn_config
from distsim.provenance import user_set_within
from distsim.validators import integer, ms_to_us, non_negative, positive

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.cells.base import FrontRouter
    from distsim.cluster.pools import PoolSpec


@dataclass(frozen=True)
class CellSettings:
    """The cell layer (distsim.cells): ``count`` cells (1: none), the front router's registered class,
    the cells' summary cadence (interval and jitter, 0: the front reads live counts) and transport delay,
    the Vivaldi-style coordinates' dimensions and scales with the per-message jitter, and spill-over
    (``spill_threshold`` outstanding requests per instance, None: off; at most ``max_hops`` per request)."""

    count: int = 1
    front_policy: str = "round_robin"
    front: type[FrontRouter] | None = None  # the registered class
    summary_interval_us: int = 0
    summary_jitter_us: int = 0
    summary_delay_us: int = 0
    dims: int = 3
    spread_ms: float = 0.0
    height_ms: float = 0.0
    jitter_us: int = 0
    spill_threshold: float | None = None
    max_hops: int = 1

    @property
    def enabled(self) -> bool:
        return self.count > 1


def cells(cfg: DictConfig, pools: Sequence[PoolSpec]) -> CellSettings:
    """``cluster.cells.*``: every pool's instances split equally among the cells, the front router, the
    summaries' cadence and delay, the network's scales and the spill-over rule."""
    key = "cluster.cells"
    count = integer(f"{key}.count", cfg.count, low=1)
    for pool in pools:
        if pool.count % count:
            where = "cluster.instances" if pool.key == "cluster" else f"{pool.key}.count"
            raise ConfigError(
                f"{key}.count",
                f"{count} cells do not divide pool {pool.name!r} ({where}={pool.count}): every cell holds an "
                "equal share of every pool",
            )
    interval = ms_to_us(f"{key}.summary_interval_ms", cfg.summary_interval_ms)
    jitter = ms_to_us(f"{key}.summary_jitter_ms", cfg.summary_jitter_ms)
    delay = ms_to_us(f"{key}.summary_delay_ms", cfg.summary_delay_ms)
    if jitter and jitter >= interval:
        raise ConfigError(f"{key}.summary_jitter_ms", f"must be smaller than summary_interval_ms (got {cfg.summary_jitter_ms})")
    if delay and not interval:
        raise ConfigError(f"{key}.summary_delay_ms", "needs summary_interval_ms > 0 (0: the front reads live counts)")
    threshold = cfg.spill.threshold
    if threshold is not None:
        threshold = positive(f"{key}.spill.threshold", threshold)
    settings = CellSettings(
        count=count,
        front_policy=str(cfg.front_policy),
        front=FRONTS.get(cfg.front_policy),
        summary_interval_us=interval,
        summary_jitter_us=jitter,
        summary_delay_us=delay,
        dims=integer(f"{key}.rtt.dims", cfg.rtt.dims, low=1),
        spread_ms=non_negative(f"{key}.rtt.spread_ms", cfg.rtt.spread_ms),
        height_ms=non_negative(f"{key}.rtt.height_ms", cfg.rtt.height_ms),
        jitter_us=ms_to_us(f"{key}.rtt.jitter_ms", cfg.rtt.jitter_ms),
        spill_threshold=threshold,
        max_hops=integer(f"{key}.spill.max_hops", cfg.spill.max_hops, low=1),
    )
    if count == 1 and dataclasses.replace(settings, front=None) != CellSettings() and user_set_within(key):
        warn_config(f"{key}.count", "is 1: no cell layer, so the other cluster.cells settings have no effect")
    return settings
