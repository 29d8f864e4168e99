"""summary.json: the run's figures, from the request table and the instances' counters.

Times in milliseconds. Every distribution reports mean, p50, p90, p95, p99 and max (numpy's linear
percentile; the inter-token distribution is weighted, see :func:`weighted_distribution`). Floats are
rounded to 4 decimals so the file reads well; the rounding is deterministic, so the file stays
byte-identical between runs of the same config and seed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

QUANTILES = (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99))


def rnd(x: Any, digits: int = 4) -> float | None:
    """Round for output; NaN and infinities become null."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return round(x, digits)


def distribution(values: np.ndarray) -> dict[str, float | None]:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None}
    pct = np.percentile(values, [q for _, q in QUANTILES])
    out = {"mean": rnd(values.mean())}
    out.update({k: rnd(v) for (k, _), v in zip(QUANTILES, pct)})
    out["max"] = rnd(values.max())
    return out


def weighted_distribution(values: np.ndarray, weights: np.ndarray) -> dict[str, float | None]:
    """Distribution of values each repeated ``weight`` times, without repeating them (inverted-CDF
    percentiles: the smallest value whose cumulative weight reaches q% of the total)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None}
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cum = np.cumsum(weights)
    total = cum[-1]
    out = {"mean": rnd(float(np.dot(values, weights) / total))}
    for key, q in QUANTILES:
        idx = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
        out[key] = rnd(values[min(idx, values.size - 1)])
    out["max"] = rnd(values[-1])
    return out


def jain_index(x: np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets everything."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 1.0
    sq = float(np.dot(x, x))
    if sq == 0.0:
        return 1.0
    return float(x.sum() ** 2 / (x.size * sq))


def tenant_fairness(requests: pd.DataFrame) -> float:
    """Jain's index over tenants of the share of each tenant's requested output tokens that were
    served (completed); equal service for every tenant gives 1."""
    if requests.empty:
        return 1.0
    served = requests["output_tokens"].where(requests["status"] == "completed", 0)
    per = pd.DataFrame({"tenant": requests["tenant"], "asked": requests["output_tokens"], "served": served})
    g = per.groupby("tenant", sort=True)[["asked", "served"]].sum()
    ratio = (g["served"] / g["asked"].where(g["asked"] > 0)).fillna(1.0).to_numpy()
    return jain_index(ratio)


def request_counts(requests: pd.DataFrame, instances: pd.DataFrame) -> dict[str, int]:
    """summary.json's ``requests``: one count per final status, and preemptions two ways."""
    status = requests["status"]
    rejected = int((status == "rejected").sum())
    return {
        "arrived": len(requests),
        "admitted": len(requests) - rejected,
        "rejected": rejected,
        "completed": int((status == "completed").sum()),
        "dropped": int((status == "dropped").sum()),
        "too_long": int(instances["too_long"].sum()),  # of the rejected: prompt + output over max_model_len
        "preempted": int((requests["preemptions"] > 0).sum()),  # requests preempted at least once
        "preemptions": int(requests["preemptions"].sum()),  # preemption events (as the parquet files count)
        "unfinished": int((status == "unfinished").sum()),
    }


def cpu_kv_counts(instances: pd.DataFrame, prompt_scheduled: int) -> dict[str, Any]:
    """summary.json's ``cpu_kv`` (only when an instance has a CPU KV tier): its blocks over the fleet,
    blocks stored and evicted, loads, blocks and tokens loaded, the share of scheduled prompt tokens loaded
    from it (counted in prefix_cache_hit_rate too), and the mean wait for a load."""
    if "cpu_kv_blocks" not in instances:
        return {}
    loads = int(instances["cpu_loads"].sum())
    hit_tokens = int(instances["cpu_hit_tokens"].sum())
    return {
        "cpu_kv": {
            "blocks": int(instances["cpu_kv_blocks"].sum()),
            "stored_blocks": int(instances["cpu_stored_blocks"].sum()),
            "evicted_blocks": int(instances["cpu_evicted_blocks"].sum()),
            "loads": loads,
            "hit_blocks": int(instances["cpu_hit_blocks"].sum()),
            "hit_tokens": hit_tokens,
            "hit_rate": rnd(hit_tokens / prompt_scheduled) if prompt_scheduled else 0.0,
            "load_ms_mean": rnd(instances["cpu_load_ms"].sum() / loads) if loads else None,
        }
    }


def _fleet(instances: pd.DataFrame, span_s: float) -> tuple[np.ndarray, np.ndarray, float]:
    """GPUs per instance, busy seconds per instance, and dollars spent over the span."""
    gpus = instances["gpus"].to_numpy(dtype=np.float64) if len(instances) else np.zeros(0)
    busy_s = instances["busy_ms"].to_numpy(dtype=np.float64) / 1e3 if len(instances) else np.zeros(0)
    cost_usd = float((instances["price_usd_per_gpu_hour"] * instances["gpus"]).sum()) * span_s / 3600.0
    return gpus, busy_s, cost_usd


def summarize(
    requests: pd.DataFrame,
    instances: pd.DataFrame,
    itl_values: np.ndarray,
    itl_weights: np.ndarray,
    *,
    seed: int,
    events: int,
    start_us: int,
    end_us: int,
) -> dict[str, Any]:
    """The summary dict (everything but fitness, which needs it as input)."""
    completed = requests[requests["status"] == "completed"]
    span_s = max(end_us - start_us, 1) / 1e6
    arrived = len(requests)
    scheduled = requests[requests["queue_ms"].notna()]
    met = int(requests["met_slo"].sum())
    prompt_scheduled = int(scheduled["input_tokens"].sum())
    gpus, busy_s, cost_usd = _fleet(instances, span_s)
    gpu_seconds = float(gpus.sum()) * span_s
    tokens_done = int(completed["input_tokens"].sum() + completed["output_tokens"].sum())
    summary: dict[str, Any] = {
        "requests": request_counts(requests, instances),
        "ttft_ms": distribution(completed["ttft_ms"].to_numpy()),
        "tpot_ms": distribution(completed["tpot_ms"].to_numpy()),
        "itl_ms": weighted_distribution(itl_values / 1000.0, itl_weights),
        "e2e_ms": distribution(completed["e2e_ms"].to_numpy()),
        "queue_ms": distribution(scheduled["queue_ms"].to_numpy()),
        "throughput": {
            "requests_per_s": rnd(len(completed) / span_s),
            "input_tokens_per_s": rnd(completed["input_tokens"].sum() / span_s),
            "output_tokens_per_s": rnd(completed["output_tokens"].sum() / span_s),
        },
        "goodput": {"slo_attainment": rnd(met / arrived) if arrived else None, "requests_per_s": rnd(met / span_s)},
        "prefix_cache_hit_rate": rnd(scheduled["cached_tokens"].sum() / prompt_scheduled) if prompt_scheduled else 0.0,
        **cpu_kv_counts(instances, prompt_scheduled),
        "gpu_utilization": rnd(float(np.dot(busy_s, gpus)) / gpu_seconds) if gpu_seconds else 0.0,
        "jain_fairness": rnd(tenant_fairness(requests)),
        "cost_usd_per_1k_tokens": rnd(cost_usd / (tokens_done / 1000.0), 9) if tokens_done else None,
        "slo_classes": slo_class_breakdown(requests),
        "sim": {"seed": seed, "events": events, "simulated_s": rnd(span_s, 6)},
    }
    summary["_derived"] = {"gpus": float(gpus.sum()), "cost_usd": cost_usd, "span_s": span_s}
    return summary


def slo_class_breakdown(requests: pd.DataFrame) -> dict[str, Any]:
    """Per SLO class: counts, SLO attainment and the latency distributions of completed requests."""
    out: dict[str, Any] = {}
    for name, group in requests.groupby("slo_class", sort=True, observed=True):
        done = group[group["status"] == "completed"]
        out[str(name)] = {
            "requests": len(group),
            "completed": len(done),
            "slo_attainment": rnd(group["met_slo"].sum() / len(group)),
            "ttft_ms": distribution(done["ttft_ms"].to_numpy()),
            "tpot_ms": distribution(done["tpot_ms"].to_numpy()),
            "e2e_ms": distribution(done["e2e_ms"].to_numpy()),
        }
    return out
