"""The cell layer at scale (issue 14 part 3): the InferMesh seed's large example, 128 cells of 1,024
instances (conf/cluster/cells_large.yaml: 131,072 H100s serving Llama-3.1-8B at TP1, a least-loaded front
on 100 ms summaries, Vivaldi-style round trips, spill-over), with 1,000,000 requests.

    python scripts/bench_cells.py                                  # the full run (minutes)
    python scripts/bench_cells.py --cells 16 --requests 100000     # a smaller fleet of the same cells
    python scripts/bench_cells.py --record --note "machine shared"   # append to scripts/results/bench_cells.txt

The workload is the embedded default's chat traffic (ShareGPT-like lengths) without its shared system
prompts (``workload.prefix.share=0``): every request's KV blocks would otherwise stay in its instance's
prefix cache as one dictionary entry each (about 170 blocks per request, a hundred-odd bytes per entry),
some 15 GB for a million requests. Arrivals are Poisson at ``--rate-per-instance`` requests per second per
instance (default 4: near the knee of one H100 on these lengths, so the whole fleet takes its share of a
burst of a million requests in about two seconds); inside each cell requests go to the least loaded
instance (fresh signals). The run is in-process and writes no files; it prints wall and CPU seconds, peak
RSS, events, events per second, the time to build the fleet, and the run's main figures.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "scripts" / "results" / "bench_cells.txt"


def overrides(cells: int, per_cell: int, requests: int, rate_per_instance: float, policy: str) -> list[str]:
    instances = cells * per_cell
    return [
        "cluster=cells_large",
        f"cluster.instances={instances}",
        f"cluster.cells.count={cells}",
        f"policy={policy}",
        "signals=fresh",
        "workload.prefix.share=0",
        f"workload.num_requests={requests}",
        f"workload.arrival.rate_rps={rate_per_instance * instances}",
        "sim.write_requests=false",
        "seed=0",
    ]


def timed_build() -> dict[str, float]:
    """Time distsim.cells.build.build_fleet (the cluster builder imports it at call time)."""
    import distsim.cells.build as cells_build

    clock: dict[str, float] = {}
    original = cells_build.build_fleet

    def build(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        fleet = original(*args, **kwargs)
        clock["build_wall_s"] = round(time.perf_counter() - t0, 2)
        clock["build_cpu_s"] = round(time.process_time() - c0, 2)
        return fleet

    cells_build.build_fleet = build
    return clock


def bench(args: argparse.Namespace) -> dict:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    from distsim import load_config, simulate

    clock = timed_build()
    cfg = load_config(overrides(args.cells, args.per_cell, args.requests, args.rate_per_instance, args.policy))
    result = simulate(cfg)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    s = result.summary
    events = s["sim"]["events"]
    return {
        "instances": args.cells * args.per_cell,
        "cells": args.cells,
        "requests": args.requests,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_gb": round(usage.ru_maxrss / 1024 / 1024, 2),
        "events": events,
        "events_per_s": round(events / wall),
        **clock,
        "completed": s["requests"]["completed"],
        "simulated_s": s["sim"]["simulated_s"],
        "ttft_p99_ms": s["ttft_ms"]["p99"],
        "e2e_p99_ms": s["e2e_ms"]["p99"],
        "gpu_utilization": s["gpu_utilization"],
        "routed_max_share": s["cells"]["routed_max_share"],
        "spilled": s["cells"]["spilled"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=128)
    ap.add_argument("--per-cell", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--rate-per-instance", type=float, default=4.0)
    ap.add_argument("--policy", default="least_loaded", help="the routing policy inside each cell")
    ap.add_argument("--record", action="store_true", help=f"append the figures to {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--note", default="", help="e.g. whether other work shared the machine")
    args = ap.parse_args()
    figures = bench(args)
    command = "python scripts/bench_cells.py " + " ".join(sys.argv[1:])
    lines = [
        f"{datetime.date.today()}  {platform.machine()}  python {platform.python_version()}  {command.strip()}"
        + (f"  ({args.note})" if args.note else ""),
        "  " + "  ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in figures.items()),
    ]
    print("\n".join(lines))
    if args.record:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
