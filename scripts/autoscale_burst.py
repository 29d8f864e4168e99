"""The autoscaling result of docs/guide/features/autoscaling.md: an MMPP burst (conf/workload/mmpp_burst.yaml,
5,000 requests) on the autoscaled H100 pool of conf/cluster/autoscale.yaml (2 replicas at first, between 2
and 8), two scaling policies against the fixed pools at the bounds, over seeds 0-2 (the same request stream
per seed for every policy). Prints a markdown table: SLO attainment, TTFT p99, mean replicas paid for,
GPU-hours and cost per million tokens, each the mean over the seeds.

    python scripts/autoscale_burst.py [--seeds 3] > scripts/results/autoscale_burst.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from distsim import load_config, simulate

BASE = ["cluster=autoscale", "workload=mmpp_burst", "cluster.autoscale.min=2"]
POLICIES = {
    "fixed 2 (no autoscaling)": ["cluster.autoscale.kind=null"],
    "fixed 8 (no autoscaling)": ["cluster.autoscale.kind=null", "cluster.instances=8"],
    "queue_slo (queue > 4/replica or TTFT misses > 5%)": [],
    "target_utilization (running, 32/replica)": [
        "cluster.autoscale.kind=target_utilization", "cluster.autoscale.signal=running", "cluster.autoscale.target=32",
    ],
}


def figures(overrides: list[str]) -> dict[str, float]:
    s = simulate(load_config(overrides)).summary
    pool = s.get("autoscale", {}).get("pools", {}).get("default")
    hours = s["sim"]["simulated_s"] / 3600.0
    gpus = pool["mean_replicas"] if pool else float(next(o for o in [*overrides, "cluster.instances=2"]
                                                       if o.startswith("cluster.instances=")).split("=")[1])
    return {
        "slo": s["goodput"]["slo_attainment"],
        "ttft_p99": s["ttft_ms"]["p99"],
        "replicas": gpus,
        "gpu_hours": pool["gpu_hours"] if pool else gpus * hours,
        "cost_mtok": s["cost_usd_per_1k_tokens"] * 1000,
        "ups": pool["scale_ups"] if pool else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    seeds = range(parser.parse_args().seeds)
    print("| policy | SLO attainment | TTFT p99 ms | mean replicas | GPU-hours | $ per 1M tokens | scale-ups |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, extra in POLICIES.items():
        runs = [figures([*BASE, *extra, f"seed={seed}"]) for seed in seeds]
        mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        print(f"| {name} | {mean['slo']:.3f} | {mean['ttft_p99']:,.0f} | {mean['replicas']:.2f} | "
              f"{mean['gpu_hours']:.3f} | {mean['cost_mtok']:.4f} | {mean['ups']:.1f} |")


if __name__ == "__main__":
    main()
