"""``fixed``: every batch takes ``batch_ms``, whatever its size: the deterministic server of queueing theory
(M/D/c with max_batch_size 1), which the tests compare against."""

from __future__ import annotations

from dataclasses import dataclass

from distsim import validators
from distsim.runtime.curves.base import CurveContext, ServiceCurve, to_us
from distsim.runtime.curves.registry import CURVES


@dataclass(frozen=True)
class FixedCurve(ServiceCurve):
    us: int

    def batch_us(self, items: int, size: float) -> int:
        return self.us


@CURVES.register("fixed")
def fixed(cfg, ctx: CurveContext) -> FixedCurve:
    validators.required(f"{ctx.key}.batch_ms", cfg.batch_ms, "for curve kind fixed")
    return FixedCurve(to_us(validators.positive(f"{ctx.key}.batch_ms", cfg.batch_ms)))
