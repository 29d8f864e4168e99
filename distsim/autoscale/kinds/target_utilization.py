"""Target utilisation: Kubernetes HPA's rule on one signal per serving replica.

desired = ceil(serving x mean / target), unchanged while mean / target lies within 1 +- ``tolerance``
(HPA's default 10%). Like HPA, replicas still provisioning count as the pool's size but not in the mean,
and a scale-up never asks for fewer replicas than already asked for (HPA skips a step whose recomputed
ratio, counting not-ready pods at zero use, would reverse the direction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distsim import validators
from distsim.autoscale.base import SCALING_SIGNALS, Scaler, ScalerParams
from distsim.autoscale.registry import SCALERS
from distsim.errors import ConfigError


@dataclass(frozen=True)
class TargetParams(ScalerParams):
    signal: str = "kv_utilization"  # kv_utilization | queue_depth | running | outstanding, per replica
    target: float | None = None  # the signal's wanted mean per serving replica (required)
    tolerance: float = 0.1  # no change while mean / target is within 1 +- tolerance

    def check(self, key: str) -> None:
        validators.choice(f"{key}.signal", self.signal, SCALING_SIGNALS)
        target = validators.positive(f"{key}.target", validators.required(f"{key}.target", self.target, "by target_utilization"))
        if self.signal == "kv_utilization" and target > 1:
            raise ConfigError(f"{key}.target", f"a KV utilisation target must be in (0, 1] (got {target!r})")
        tol = validators.non_negative(f"{key}.tolerance", self.tolerance)
        if tol >= 1:
            raise ConfigError(f"{key}.tolerance", f"must be < 1 (got {tol!r})")


@SCALERS.register("target_utilization")
class TargetUtilization(Scaler):
    Params = TargetParams

    def desired(self, probe) -> int:
        p = self.params
        if probe.serving == 0:
            return probe.target
        ratio = probe.mean(p.signal) / p.target
        if abs(ratio - 1.0) <= p.tolerance:
            return probe.target
        wanted = math.ceil(probe.serving * ratio - 1e-9)
        return max(wanted, probe.target) if ratio > 1.0 else wanted
