"""The hedging experiment (InferMesh's mesh_hedge): does a hedge sent after 0.2, 0.35 or 0.5 of
the TTFT SLO cut the p99, and how much work does it waste? Bursty traffic of heavy-tailed prompts
(conf/workload/mmpp_heavy_tail.yaml) on four H100s behind round robin; each copy goes to the instance with
the fewest outstanding requests (conf/policy/hedged.yaml). Every setting runs the same seeds, so the
workloads are identical across settings; figures are means over seeds with a 95% t-interval.

    python scripts/bench_hedging.py [--seeds 10] [--out scripts/results/bench_hedging.txt]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from distsim import load_config, simulate
from distsim.runner.ranking import mean_ci

BASE = ["workload=mmpp_heavy_tail", "policy=hedged", "cluster.instances=4"]
SETTINGS = {"off": ["policy.hedge.delay_slo_fraction=null"], **{
    f"{f:.2f} x SLO": [f"policy.hedge.delay_slo_fraction={f}"] for f in (0.2, 0.35, 0.5)
}}  # fmt: skip
FIGURES = ("ttft_p99_ms", "e2e_p99_ms", "slo_attainment", "hedge_rate", "hedge_wins", "wasted_gpu_pct")


def figures(summary: dict) -> dict[str, float]:
    hedging = summary.get("hedging") or {"hedge_rate": 0.0, "hedged": 0, "wins": {"hedge": 0}, "wasted_gpu_fraction": 0.0}
    return {
        "ttft_p99_ms": summary["ttft_ms"]["p99"],
        "e2e_p99_ms": summary["e2e_ms"]["p99"],
        "slo_attainment": summary["goodput"]["slo_attainment"],
        "hedge_rate": hedging["hedge_rate"],
        "hedge_wins": hedging["wins"]["hedge"] / hedging["hedged"] if hedging["hedged"] else 0.0,
        "wasted_gpu_pct": 100.0 * hedging["wasted_gpu_fraction"],
    }


def cell(values: list[float]) -> str:
    mean, low, high = mean_ci(np.array(values, dtype=float))
    return f"{mean:>10.4g} ±{(high - low) / 2:<9.3g}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("scripts/results/bench_hedging.txt"))
    args = ap.parse_args()
    names = [*FIGURES, "d_ttft_p99_ms", "d_slo_attainment"]
    lines = [f"python scripts/bench_hedging.py --seeds {args.seeds}   ({' '.join(BASE)})",
             "mean over seeds ± half a 95% t-interval; d_: paired difference from hedging off, seed by seed",
             f"{'hedge delay':<12}" + "".join(f"{name:>22}" for name in names)]  # fmt: skip
    off: list[dict[str, float]] = []
    for label, overrides in SETTINGS.items():
        runs = [figures(simulate(load_config([*BASE, *overrides, f"seed={s}"])).summary) for s in range(args.seeds)]
        off = off or runs
        cells = [cell([r[name] for r in runs]) for name in FIGURES]
        for name in ("ttft_p99_ms", "slo_attainment"):
            cells.append(cell([r[name] - o[name] for r, o in zip(runs, off)]))
        lines.append(f"{label:<12}" + "".join(f"{c:>22}" for c in cells))
        print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
