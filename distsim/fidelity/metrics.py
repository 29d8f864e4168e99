"""The compared figures, one definition for the measured and the simulated side of every comparison.

Two sets, by what the measurement holds:

- a run with per-request times (``validate``): TTFT, TPOT and E2E at mean, p50, p90, p95, p99 over the
  requests that have the value (TPOT needs two output tokens): :func:`compare`, validation.json;
- a run with per-stage aggregates only (``h100_vllm_runs``, its README's definitions), and the serving
  fit on any run: per stage and for the whole run (stage -1), ``e2e_*`` and ``ttft_*`` at mean, p90,
  p99 over the completed requests, and ``itl_mean`` = (mean E2E - mean TTFT) / (mean output tokens - 1):
  :func:`stage_metrics`.

Percentiles are numpy's linear ones, as in summary.json. Error % = (simulated - measured) / measured x 100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms")
STATS = ("mean", "p50", "p90", "p95", "p99")
METRICS = tuple(f"{lat}.{stat}" for lat in LATENCIES for stat in STATS)
STAGE_METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean")
WHOLE_RUN = -1  # the stage index of the whole run


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


def stage_index(arrival_s: np.ndarray, durations_s: Sequence[float]) -> np.ndarray:
    """The stage of each arrival: stage i holds [sum of durations before i, sum through i); arrivals
    past the last boundary (a late user round) go to the last stage."""
    bounds = np.cumsum(np.asarray(durations_s, dtype=np.float64))
    idx = np.searchsorted(bounds, np.asarray(arrival_s, dtype=np.float64), side="right")
    return np.minimum(idx, len(bounds) - 1)


def group_metrics(e2e_ms: np.ndarray, ttft_ms: np.ndarray, output_tokens: np.ndarray) -> dict[str, float]:
    """The :data:`STAGE_METRICS` of one group of completed requests."""
    out = {}
    for name, values in (("e2e", e2e_ms), ("ttft", ttft_ms)):
        for stat in ("mean", "p90", "p99"):
            out[f"{name}_{stat}"] = stat_of(values, stat)
    tokens = float(output_tokens.mean()) if output_tokens.size else math.nan
    out["itl_mean"] = (out["e2e_mean"] - out["ttft_mean"]) / (tokens - 1.0) if tokens > 1.0 else math.nan
    return out


def stage_metrics(requests: pd.DataFrame, durations_s: Sequence[float] = ()) -> pd.DataFrame:
    """Columns ``stage, metric, value`` for the whole run (-1) and every stage of ``durations_s`` (none:
    the whole run only), over the completed requests of a table with ``arrival_s``, ``completed`` (bool),
    ``e2e_ms``, ``ttft_ms``, ``output_tokens`` (:func:`metric_frame`). Metrics in :data:`STAGE_METRICS` order."""
    done = requests[requests["completed"].astype(bool)]
    stages = stage_index(done["arrival_s"].to_numpy(), durations_s) if len(durations_s) else None
    rows = []
    for stage in (WHOLE_RUN, *range(len(durations_s))):
        mask = np.ones(len(done), dtype=bool) if stage == WHOLE_RUN else stages == stage
        values = group_metrics(
            done["e2e_ms"].to_numpy(dtype=np.float64)[mask],
            done["ttft_ms"].to_numpy(dtype=np.float64)[mask],
            done["output_tokens"].to_numpy(dtype=np.float64)[mask],
        )
        rows += [(stage, m, values[m]) for m in STAGE_METRICS]
    return pd.DataFrame(rows, columns=["stage", "metric", "value"])


def metric_frame(requests: pd.DataFrame, arrival_offset_s: float = 0.0) -> pd.DataFrame:
    """What :func:`stage_metrics` reads, from a request table with ``arrival_ms``, ``e2e_ms``, ``ttft_ms``,
    ``output_tokens`` (and ``status``: a simulated one; a measured one without it counts a request with
    an E2E as completed); ``arrival_offset_s`` puts the arrivals on the measurement's clock."""
    completed = (requests["status"] == "completed") if "status" in requests else requests["e2e_ms"].notna()
    return pd.DataFrame({
        "arrival_s": requests["arrival_ms"].to_numpy(dtype=np.float64) / 1000.0 + float(arrival_offset_s),
        "completed": np.asarray(completed, dtype=bool),
        "e2e_ms": requests["e2e_ms"].to_numpy(dtype=np.float64),
        "ttft_ms": requests["ttft_ms"].to_numpy(dtype=np.float64),
        "output_tokens": requests["output_tokens"].to_numpy(dtype=np.float64),
    })
