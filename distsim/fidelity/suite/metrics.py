"""Per-stage metrics by the definitions of the h100_vllm_runs measurements (its README):

- stages: requests split by arrival time at the cumulative stage durations (a request arriving after
  the last boundary, e.g. a late user round, counts in the last stage); stage -1 is the whole run;
- ``e2e_*``, ``ttft_*``: mean and numpy linear percentiles over the stage's completed requests, in ms;
- ``itl_mean`` = (mean E2E - mean TTFT) / (mean output tokens - 1).

The same function computes them for a simulated request table, so both sides share one definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from distsim.fidelity.metrics import stat_of

STAGE_METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl_mean")
WHOLE_RUN = -1


def stage_index(arrival_s: np.ndarray, durations_s: Sequence[float]) -> np.ndarray:
    """The stage of each arrival: stage i holds [sum of durations before i, sum through i); arrivals
    past the last boundary go to the last stage."""
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


def stage_metrics(requests: pd.DataFrame, durations_s: Sequence[float]) -> pd.DataFrame:
    """Columns ``stage, metric, value`` for every stage and the whole run (-1), over the completed
    requests of a table with ``arrival_s``, ``completed`` (bool), ``e2e_ms``, ``ttft_ms``,
    ``output_tokens``. Stage -1 first, then 0, 1, ...; metrics in :data:`STAGE_METRICS` order."""
    done = requests[requests["completed"].astype(bool)]
    stages = stage_index(done["arrival_s"].to_numpy(), durations_s)
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
