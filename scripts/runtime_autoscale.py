"""The runtime autoscaling result of docs/guide/features/autoscaling.md: the vision runtime of
conf/cluster/mixed_fleet.yaml (ViT-B/16 on L40S, batches of up to 32 images, 5 ms window, 2 slots) alone
under an MMPP burst of vision requests (1,500 req/s calm for 6 s on average, 5,000 req/s bursts of 2 s,
150,000 requests, about a minute), fixed pools of one and three replicas against two scalers between them
(interval 1 s, cool-down 5 s, a 2 s provisioning delay: a warm node with the image and weights cached, not
the 30 s cold default), over seeds 0-2 (the same requests per seed for every policy). Prints a markdown
table: SLO attainment (200 ms), latency p99, mean replicas billed, the vision pool's GPU-hours, scale-ups,
each the mean over the seeds.

    python scripts/runtime_autoscale.py [--seeds 3] > scripts/results/runtime_autoscale.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from distsim import load_config, simulate

BASE = ["cluster=mixed_fleet", "workload=mixed_70_20_10", "workload.mix.llm=0", "workload.mix.asr=0",
        "workload.num_requests=150000", "workload.arrival.process=mmpp", "workload.arrival.rate_rps=null",
        "workload.arrival.rates_rps=[1500,5000]", "workload.arrival.dwell_s=[6,2]"]
SCALE = "min:1,max:3,interval_s:1,provision_s:2,cooldown_s:5"
POLICIES = {
    "fixed 1 (no autoscaling)": [],
    "fixed 3 (no autoscaling)": ["cluster.pools.1.count=3"],
    "queue_slo (queue > 16/replica or misses > 5%)": [f"+cluster.pools.1.autoscale={{kind:queue_slo,queue_per_replica:16,{SCALE}}}"],
    "target_utilization (outstanding, 8/replica)": [
        f"+cluster.pools.1.autoscale={{kind:target_utilization,signal:outstanding,target:8,{SCALE}}}"],
}


def figures(overrides: list[str]) -> dict[str, float]:
    result = simulate(load_config(overrides))
    s, inst = result.summary, result.instances
    vision = s["types"]["vision"]
    pool = s.get("autoscale", {}).get("pools", {}).get("vision")
    fixed = int((inst["pool"] == "vision").sum())
    hours = s["sim"]["simulated_s"] / 3600.0
    return {
        "slo": vision["slo_attainment"],
        "p99": vision["latency_ms"]["p99"],
        "replicas": pool["mean_replicas"] if pool else fixed,
        "gpu_hours": pool["gpu_hours"] if pool else fixed * hours,
        "ups": pool["scale_ups"] if pool else 0,
    }


def mean_over(seeds: range, extra: list[str]) -> dict[str, float]:
    """Each figure's mean over ``seeds``."""
    runs = [figures([*BASE, *extra, f"seed={seed}"]) for seed in seeds]
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    seeds = range(parser.parse_args().seeds)
    means = {name: mean_over(seeds, extra) for name, extra in POLICIES.items()}
    lines = ["| policy | SLO attainment | latency p99 ms | mean replicas | GPU-hours | scale-ups |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {m['slo']:.3f} | {m['p99']:,.1f} | {m['replicas']:.2f} | {m['gpu_hours']:.4f} | {m['ups']:.1f} |"
              for name, m in means.items()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
