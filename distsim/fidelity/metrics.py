"""The compared figures: TTFT, TPOT and E2E at mean, p50, p90, p95, p99, and their relative errors.

Percentiles are numpy's linear ones, as in summary.json, computed the same way for the measured and
the simulated request tables (over requests that have the value: TPOT needs two output tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms")
STATS = ("mean", "p50", "p90", "p95", "p99")
METRICS = tuple(f"{lat}.{stat}" for lat in LATENCIES for stat in STATS)


def latency_stats(requests: pd.DataFrame) -> dict[str, float]:
    """``{"ttft_ms.mean": ..., "ttft_ms.p50": ..., ...}`` over the requests' latency columns."""
    out: dict[str, float] = {}
    for lat in LATENCIES:
        values = requests[lat].to_numpy(dtype=np.float64)
        values = values[~np.isnan(values)]
        for stat in STATS:
            out[f"{lat}.{stat}"] = stat_of(values, stat)
    return out


def stat_of(values: np.ndarray, stat: str) -> float:
    """``mean`` or a numpy (linear) percentile ``pNN`` of ``values``; NaN when there are none."""
    if values.size == 0:
        return math.nan
    if stat == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(stat[1:])))


def error_pct(measured: float, simulated: float) -> float:
    """Signed relative error in percent: positive when the simulator is slower than the measurement."""
    if not measured:
        return math.nan
    return (simulated - measured) / measured * 100.0


@dataclass(frozen=True)
class MetricComparison:
    measured: float
    simulated: float

    @property
    def error_pct(self) -> float:
        return error_pct(self.measured, self.simulated)


def compare(measured: pd.DataFrame, simulated: pd.DataFrame) -> dict[str, MetricComparison]:
    """Measured against simulated for every metric in :data:`METRICS`."""
    m, s = latency_stats(measured), latency_stats(simulated)
    return {k: MetricComparison(m[k], s[k]) for k in METRICS}


def comparison_json(comparison: dict[str, MetricComparison]) -> dict[str, dict[str, float | None]]:
    """validation.json's content: ``{metric: {measured, simulated, error_pct}}`` (rounded; NaN -> null)."""

    def rnd(x: float, digits: int) -> float | None:
        return None if x is None or not math.isfinite(x) else round(x, digits)

    return {
        k: {
            "measured": rnd(c.measured, 4),
            "simulated": rnd(c.simulated, 4),
            "error_pct": rnd(c.error_pct, 3),
        }
        for k, c in comparison.items()
    }
