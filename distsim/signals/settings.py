"""``signals.*`` checked into frozen settings: how fresh the instance-reported signals are (resolve, then
the signal board, distsim.signals.board)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from distsim.errors import ConfigError
from distsim.validators import ms_to_us

if TYPE_CHECKING:
    from omegaconf import DictConfig

SIGNALS = ("queue_depth", "running", "kv_utilization", "cache_hit_rate", "queued_tokens")


@dataclass(frozen=True)
class SignalSettings:
    """How fresh instance-reported signals are: per signal (interval_us, jitter_us), 0 = read live;
    a scrape becomes visible ``transport_delay_us`` after it is taken."""

    cadence: dict[str, tuple[int, int]] = field(default_factory=lambda: {name: (0, 0) for name in SIGNALS})
    transport_delay_us: int = 0

    @property
    def live(self) -> bool:
        return self.transport_delay_us == 0 and all(interval == 0 for interval, _ in self.cadence.values())


def signals(cfg: DictConfig) -> SignalSettings:
    """``signals.*``: per signal (interval_us, jitter_us), and the transport delay."""
    interval = ms_to_us("signals.refresh_interval_ms", cfg.refresh_interval_ms)
    jitter = ms_to_us("signals.jitter_ms", cfg.jitter_ms)
    if jitter and jitter >= interval:
        raise ConfigError("signals.jitter_ms", f"must be smaller than refresh_interval_ms (got {cfg.jitter_ms})")
    cadence = {name: (interval, jitter) for name in SIGNALS}
    for name, spec in (cfg.per_signal or {}).items():
        key = f"signals.per_signal.{name}"
        if name not in cadence:
            raise ConfigError(key, f"unknown signal; known: {', '.join(SIGNALS)}")
        spec = spec or {}
        unknown = set(spec) - {"interval_ms", "jitter_ms"}
        if unknown:
            raise ConfigError(f"{key}.{sorted(unknown)[0]}", "unknown key; known: interval_ms, jitter_ms")
        iv = ms_to_us(f"{key}.interval_ms", spec.get("interval_ms", cfg.refresh_interval_ms))
        jt = ms_to_us(f"{key}.jitter_ms", spec.get("jitter_ms", 0))
        if jt and jt >= iv:
            raise ConfigError(f"{key}.jitter_ms", "must be smaller than interval_ms")
        cadence[name] = (iv, jt)
    return SignalSettings(cadence, ms_to_us("signals.transport_delay_ms", cfg.transport_delay_ms))
