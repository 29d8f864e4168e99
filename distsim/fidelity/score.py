"""The calibration's score of one candidate: how far a replay is from the measured run.

The reported figures (TTFT, TPOT, E2E at mean, p50, p90, p95, p99; the means weigh double) plus a
per-request term, as one weighted mean of relative errors (a fraction: 0.01 = 1%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from distsim.fidelity.metrics import LATENCIES, METRICS, STATS, MetricComparison, compare

DEFAULT_WEIGHTS: dict[str, float] = {
    f"{lat}.{s}": (2.0 if s == "mean" else 1.0) for lat in LATENCIES for s in STATS
}
REQUEST_WEIGHT = 6.0  # of the per-request error in the score, against 20 for the 15 figures
FAILED = 1e6  # the score of a candidate whose simulation completes no request


@dataclass
class RunEvaluation:
    comparison: dict[str, MetricComparison]
    request_error: float  # per_request_error, a fraction


def failed() -> RunEvaluation:
    """The evaluation of a replay that completed no request."""
    return RunEvaluation({m: MetricComparison(1.0, math.nan) for m in METRICS}, math.nan)


def evaluate_replay(measured: pd.DataFrame, simulated: pd.DataFrame) -> RunEvaluation:
    """Measured against simulated (completed requests only)."""
    done = simulated[simulated["status"] == "completed"]
    if not len(done):
        return failed()
    return RunEvaluation(compare(measured, done), per_request_error(measured, done))


def per_request_error(measured: pd.DataFrame, simulated: pd.DataFrame) -> float:
    """Mean over TTFT, TPOT and E2E of sum |simulated - measured| / sum measured, matching requests by
    id. Distribution figures alone leave directions of the coefficients unseen (a run whose decode
    batch hardly varies fixes only base + batch x per-token); per-request times pin them. Summing
    before dividing keeps requests with tiny latencies (one step off = +100%) from dominating."""
    sim = simulated.set_index("request_id")
    errs = []
    for col in LATENCIES:
        m = measured[col].to_numpy(dtype=np.float64)
        s = sim[col].reindex(measured["request_id"]).to_numpy(dtype=np.float64)
        ok = np.isfinite(m)
        if not ok.any() or m[ok].sum() <= 0:
            continue
        diff = np.where(np.isfinite(s[ok]), np.abs(s[ok] - m[ok]), m[ok])
        errs.append(float(diff.sum() / m[ok].sum()))
    return float(np.mean(errs)) if errs else math.nan


def score(ev: RunEvaluation, weights: dict[str, float], request_weight: float = REQUEST_WEIGHT) -> float:
    """Weighted mean of the figures' absolute relative errors and the per-request error (fractions)."""
    total, wsum = request_weight * ev.request_error, request_weight
    if not math.isfinite(total):
        return FAILED
    for metric, w in weights.items():
        err = ev.comparison[metric].error_pct
        if not math.isfinite(err):
            return FAILED
        total += w * abs(err) / 100.0
        wsum += w
    return total / wsum
