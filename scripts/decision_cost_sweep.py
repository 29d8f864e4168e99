"""Thinking against sending: how much decision cost a smarter router can afford before round robin (whose
decision costs ~0.6 us, docs/guide/policies.md) beats it. Each policy at each decision cost
(``policy.routing.latency_ms``: a fixed delay before the request reaches its instance) on the default
cluster (4 x H100, Llama-3.1-8B) under two workloads: the default (Poisson 25 req/s near the knee) and
mmpp_heavy_tail (bursts of heavy-tailed prompts); over a few seeds. The TTFT figures are means over the
seeds, and the break-even is the largest swept cost at which the policy's mean TTFT is still below round
robin's at no cost on that workload.

    PYTHONPATH=. python scripts/decision_cost_sweep.py [--seeds 0 1] [--requests 1000] [--out scripts/results/decision_cost_sweep.txt]

short_prompt_priority runs on the priority scheduler (cluster.engine.scheduler=priority), the others on fcfs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from distsim import load_config, simulate

ROOT = Path(__file__).resolve().parents[1]
POLICIES = {
    "round_robin": ["policy=round_robin"],
    "least_loaded": ["policy=least_loaded"],
    "short_prompt_priority": ["policy=short_prompt_priority", "cluster.engine.scheduler=priority"],
}
COSTS_MS = [0.0, 0.25, 2.5, 10.0, 25.0, 50.0]
WORKLOADS = ["workload=default", "workload=mmpp_heavy_tail"]


def figures(overrides: list[str]) -> dict[str, float]:
    """Mean and p90 TTFT of the completed requests, and the mean TTFT of the shorter half of the prompts."""
    t = simulate(load_config([*overrides, "sim.write_requests=false"])).requests
    t = t[t["status"] == "completed"]
    ttft = t["ttft_ms"].to_numpy()
    short = t["input_tokens"].to_numpy() <= np.median(t["input_tokens"].to_numpy())
    return {
        "mean": float(ttft.mean()),
        "p90": float(np.percentile(ttft, 90)),
        "short": float(ttft[short].mean()),
    }


def sweep(workload: str, seeds: list[int], requests: int) -> list[str]:
    """The table of one workload: every policy at every cost, then each policy's break-even."""
    rows = {}
    for name, policy in POLICIES.items():
        for cost in COSTS_MS:
            runs = [
                figures(
                    [
                        workload,
                        *policy,
                        f"policy.routing.latency_ms={cost}",
                        f"seed={seed}",
                        f"workload.num_requests={requests}",
                    ]
                )
                for seed in seeds
            ]
            rows[name, cost] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    baseline = rows["round_robin", 0.0]["mean"]
    lines = [
        workload,
        f"{'policy':<22} {'cost_ms':>8} {'ttft_mean_ms':>13} {'ttft_p90_ms':>12} {'short_half_ms':>14} {'vs_rr@0':>8}",
    ]
    for (name, cost), r in rows.items():
        lines.append(
            f"{name:<22} {cost:>8.2f} {r['mean']:>13.1f} {r['p90']:>12.1f} {r['short']:>14.1f} {r['mean'] - baseline:>+8.1f}"
        )
    for name in POLICIES:
        if name != "round_robin":
            under = [cost for cost in COSTS_MS if rows[name, cost]["mean"] < baseline]
            said = (
                f"beats round robin's mean TTFT at no cost up to {max(under):g} ms a decision (of those swept)"
                if under
                else "never beats round robin at no cost"
            )
            lines.append(f"  {name}: {said}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=ROOT / "scripts" / "results" / "decision_cost_sweep.txt")
    args = ap.parse_args()
    lines = [
        f"decision cost sweep: default cluster, {args.requests} requests, seeds {args.seeds}",
        f"(PYTHONPATH=. python scripts/decision_cost_sweep.py --seeds {' '.join(map(str, args.seeds))} --requests {args.requests})",
    ]
    for workload in WORKLOADS:
        lines += ["", *sweep(workload, args.seeds, args.requests)]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
