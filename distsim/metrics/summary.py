"""summary.json: the run's figures, from the request table and the instances' counters.

Times in milliseconds. Every distribution reports mean, min, p50, p75, p90, p95, p99 and max (numpy's
linear percentile; the inter-token distribution is weighted, see :func:`weighted_distribution`). Floats are
rounded to 4 decimals so the file reads well; the rounding is deterministic, so the file stays
byte-identical between runs of the same config and seed.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import numpy as np

from distsim.metrics.columns import Table

QUANTILES = (("p50", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99))


def rnd(x: SupportsFloat | None, digits: int = 4) -> float | None:
    """Round for output; NaN and infinities become null."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return round(x, digits)


EMPTY = {"mean": None, "min": None, **{k: None for k, _ in QUANTILES}, "max": None}  # no value to describe


def distribution(values: np.ndarray) -> dict[str, float | None]:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return dict(EMPTY)
    pct = np.percentile(values, [q for _, q in QUANTILES])
    out = {"mean": rnd(values.mean()), "min": rnd(values.min())}
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
        return dict(EMPTY)
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cum = np.cumsum(weights)
    total = cum[-1]
    out = {"mean": rnd(float(np.dot(values, weights) / total)), "min": rnd(values[0])}
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


def variation(x: np.ndarray) -> float:
    """The coefficient of variation: population standard deviation over the mean (0 when all are 0)."""
    x = np.asarray(x, dtype=np.float64)
    mean = float(x.mean()) if x.size else 0.0
    return float(x.std() / mean) if mean > 0.0 else 0.0


def instance_balance(instances: Table) -> dict[str, dict[str, float | None]]:
    """summary.json's ``instance_balance``: Jain's index and the coefficient of variation across the engines
    (a batching runtime's replicas aside) of the requests each served (completed, or handed off under P/D),
    the tokens it computed (prefill and decode) and its time-weighted mean KV utilisation. Whole-run
    counters, as instances.parquet's."""
    engines = instances["role"] != "runtime"
    loads = {
        "requests": (instances["completed"] + instances["handed_off"])[engines],
        "tokens": (instances["prefill_tokens"] + instances["decode_tokens"])[engines],
        "kv_utilization": np.nan_to_num(instances["kv_utilization_mean"][engines]),
    }
    return {name: {"jain": rnd(jain_index(x)), "cv": rnd(variation(x))} for name, x in loads.items()}


def is_status(requests: Table, name: str) -> np.ndarray:
    """The rows whose status is ``name`` (completed, rejected, dropped, unfinished)."""
    return requests["status"] == requests.categories("status").index(name)


def tenant_fairness(requests: Table) -> float:
    """Jain's index over tenants of the share of each tenant's requested output tokens that were
    served (completed); equal service for every tenant gives 1."""
    if not len(requests):
        return 1.0
    asked_tokens = requests["output_tokens"]
    served_tokens = np.where(is_status(requests, "completed"), asked_tokens, 0)
    tenants, which = np.unique(requests["tenant"], return_inverse=True)
    asked = np.zeros(len(tenants), dtype=np.int64)
    served = np.zeros(len(tenants), dtype=np.int64)
    np.add.at(asked, which, asked_tokens)
    np.add.at(served, which, served_tokens)
    ratio = np.where(asked > 0, served / np.maximum(asked, 1), 1.0)  # a tenant that asked for nothing: 1
    return jain_index(ratio)


def request_counts(requests: Table, instances: Table) -> dict[str, int]:
    """summary.json's ``requests``: one count per final status, and preemptions two ways."""
    rejected = int(is_status(requests, "rejected").sum())
    preemptions = requests["preemptions"]
    return {
        "arrived": len(requests),
        "admitted": len(requests) - rejected,
        "rejected": rejected,
        "completed": int(is_status(requests, "completed").sum()),
        "dropped": int(is_status(requests, "dropped").sum()),
        "too_long": int(instances["too_long"].sum()),  # of the rejected: prompt + output over max_model_len
        "preempted": int((preemptions > 0).sum()),  # requests preempted at least once
        "preemptions": int(preemptions.sum()),  # preemption events (as the parquet files count)
        "unfinished": int(is_status(requests, "unfinished").sum()),
    }


def cpu_kv_counts(instances: Table, prompt_scheduled: int) -> dict[str, Any]:
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


def _fleet(instances: Table, span_s: float, billed_s: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float, float, float]:
    """GPUs and busy seconds per instance, dollars spent over the span, GPU-seconds paid for and the mean
    GPUs running. Every instance runs the whole span, unless autoscaling says for how long each ran
    (``billed_s``: seconds within the span). On MIG slices an instance's GPUs are its share of a GPU
    (``gpu_fraction``); its price is already per slice."""
    gpus = instances["gpus"].astype(np.float64)
    if "gpu_fraction" in instances:
        gpus = gpus * instances["gpu_fraction"]
    busy_s = instances["busy_ms"] / 1e3
    if billed_s is None:
        cost_usd = float((instances["price_usd_per_gpu_hour"] * instances["gpus"]).sum()) * span_s / 3600.0
        return gpus, busy_s, cost_usd, float(gpus.sum()) * span_s, float(gpus.sum())
    gpu_seconds = float(np.dot(gpus, billed_s))
    cost_usd = float(np.dot(instances["price_usd_per_gpu_hour"] * instances["gpus"], billed_s)) / 3600.0
    return gpus, busy_s, cost_usd, gpu_seconds, gpu_seconds / span_s


def llm_rows(requests: Table) -> np.ndarray | bool:
    """The LLM requests of a run with request types (workload.mix), whose latencies are the top-level
    figures: a vision or speech request's latency is of another kind and has its own ``types`` section.
    True (every row) when the run has no types."""
    return requests["type"] == "llm" if "type" in requests else True


def summarize(
    requests: Table,
    instances: Table,
    itl_values: np.ndarray,
    itl_weights: np.ndarray,
    *,
    seed: int,
    events: int,
    start_us: int,
    end_us: int,
    billed_s: np.ndarray | None = None,
) -> dict[str, Any]:
    """The summary dict (everything but fitness, which needs it as input). ``billed_s``: with autoscaling,
    the seconds each instance ran within the span (cost, GPU utilisation and the fitness's GPUs follow it)."""
    done = is_status(requests, "completed")
    span_s = max(end_us - start_us, 1) / 1e6
    arrived = len(requests)
    queue_ms = requests["queue_ms"]
    scheduled = ~np.isnan(queue_ms)
    met = int(requests["met_slo"].sum())
    prompt_scheduled = int(requests["input_tokens"][scheduled].sum())
    gpus, busy_s, cost_usd, gpu_seconds, mean_gpus = _fleet(instances, span_s, billed_s)
    done_input, done_output = requests["input_tokens"][done], requests["output_tokens"][done]
    tokens_done = int(done_input.sum() + done_output.sum())
    llm = llm_rows(requests)
    summary: dict[str, Any] = {
        "requests": request_counts(requests, instances),
        "ttft_ms": distribution(requests["ttft_ms"][done & llm]),
        "tpot_ms": distribution(requests["tpot_ms"][done & llm]),
        "itl_ms": weighted_distribution(itl_values / 1000.0, itl_weights),
        "e2e_ms": distribution(requests["e2e_ms"][done & llm]),
        "queue_ms": distribution(queue_ms[scheduled & llm]),
        "throughput": {
            "requests_per_s": rnd(int(done.sum()) / span_s),
            "input_tokens_per_s": rnd(done_input.sum() / span_s),
            "output_tokens_per_s": rnd(done_output.sum() / span_s),
        },
        "goodput": {"slo_attainment": rnd(met / arrived) if arrived else None, "requests_per_s": rnd(met / span_s)},
        "prefix_cache_hit_rate": rnd(requests["cached_tokens"][scheduled].sum() / prompt_scheduled) if prompt_scheduled else 0.0,
        **cpu_kv_counts(instances, prompt_scheduled),
        "gpu_utilization": rnd(float(np.dot(busy_s, gpus)) / gpu_seconds) if gpu_seconds else 0.0,
        "jain_fairness": rnd(tenant_fairness(requests)),
        "instance_balance": instance_balance(instances),
        "cost_usd_per_1k_tokens": rnd(cost_usd / (tokens_done / 1000.0), 9) if tokens_done else None,
        "slo_classes": slo_class_breakdown(requests),
        "sim": {"seed": seed, "events": events, "simulated_s": rnd(span_s, 6)},
    }
    summary["_derived"] = {"gpus": mean_gpus, "cost_usd": cost_usd, "span_s": span_s}
    return summary


def slo_class_breakdown(requests: Table) -> dict[str, Any]:
    """Per SLO class (in name order): counts, SLO attainment and the latency distributions of completed
    requests."""
    classes = requests["slo_class"]
    done = is_status(requests, "completed")
    out: dict[str, Any] = {}
    for name in sorted({c for c in classes.tolist() if c is not None}):
        mine = classes == name
        n = int(mine.sum())
        out[str(name)] = {
            "requests": n,
            "completed": int((mine & done).sum()),
            "slo_attainment": rnd(int(requests["met_slo"][mine].sum()) / n),
            **{key: distribution(requests[key][mine & done]) for key in ("ttft_ms", "tpot_ms", "e2e_ms")},
        }
    return out
