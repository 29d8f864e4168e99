"""Scheduled: the replicas follow a list of (time_s, replicas), as a cron-driven scaler (KEDA's cron
scaler, a scheduled HPA minimum) would set them. Before the first entry the pool keeps its ``count``. Each
change point is evaluated at its own instant, besides every ``interval_s``; a scale-down still waits out
the cool-down like any other (set ``cooldown_s: 0`` to follow the schedule exactly)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distsim import validators
from distsim.autoscale.base import Scaler, ScalerParams
from distsim.autoscale.registry import SCALERS
from distsim.errors import ConfigError


@dataclass(frozen=True)
class ScheduleParams(ScalerParams):
    schedule: list[Any] | None = None  # [[time_s, replicas], ...], times strictly increasing (required)

    def entries(self) -> list[tuple[float, int]]:
        return [(float(t), int(n)) for t, n in self.schedule or ()]

    def check(self, key: str) -> None:
        entries = validators.required(f"{key}.schedule", self.schedule, "by the scheduled autoscaler")
        if isinstance(entries, str) or not isinstance(entries, Sequence) or not entries:
            raise ConfigError(f"{key}.schedule", f"must be a non-empty list of [time_s, replicas] (got {entries!r})")
        last = -1.0
        for i, entry in enumerate(entries):
            if isinstance(entry, str) or not isinstance(entry, Sequence) or len(entry) != 2:
                raise ConfigError(f"{key}.schedule[{i}]", f"must be [time_s, replicas] (got {entry!r})")
            t = validators.non_negative(f"{key}.schedule[{i}][0]", entry[0])
            validators.integer(f"{key}.schedule[{i}][1]", entry[1], low=1)
            if t <= last:
                raise ConfigError(f"{key}.schedule[{i}][0]", f"times must increase (got {t:g} after {last:g})")
            last = t

    def check_limits(self, key: str, low: int, high: int) -> None:
        for i, (_, n) in enumerate(self.entries()):
            if not low <= n <= high:
                raise ConfigError(f"{key}.schedule[{i}][1]", f"must lie within min {low} and max {high} (got {n})")


@SCALERS.register("scheduled")
class Scheduled(Scaler):
    Params = ScheduleParams

    def __init__(self, params: ScheduleParams, initial: int, rng=None):
        super().__init__(params, initial, rng)
        self.entries = [(round(t * 1e6), n) for t, n in params.entries()]

    def desired(self, probe) -> int:
        wanted = self.initial
        for at_us, n in self.entries:
            if at_us > probe.now_us:
                break
            wanted = n
        return wanted

    def wake_times_us(self) -> tuple[int, ...]:
        return tuple(at_us for at_us, _ in self.entries)
