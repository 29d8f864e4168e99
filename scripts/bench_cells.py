"""The cell layer at scale: the InferMesh seed's large example, 128 cells of 1,024
instances (conf/cluster/cells_large.yaml: 131,072 H100s serving Llama-3.1-8B at TP1, a least-loaded front
on 100 ms summaries, Vivaldi-style round trips, spill-over), with 1,000,000 requests.

    python scripts/bench_cells.py                                  # the full run (minutes)
    python scripts/bench_cells.py --cells 16 --requests 100000     # a smaller fleet of the same cells
    python scripts/bench_cells.py --record --note "machine shared"   # append to scripts/results/bench_cells.txt

The workload is the embedded default's chat traffic (ShareGPT-like lengths) with its shared system
prompts (80% of requests open with one of 400 shared 2,048-token prompts); ``--prefix-share 0`` takes them
away (the figures recorded before the KV cache was kept by segments, when each cached block was a dictionary entry of its own and a
million requests' prompts would have needed some 15 GB). Arrivals are Poisson at ``--rate-per-instance`` requests per second per
instance (default 4: the million requests arrive within about two seconds, some 7.6 per instance, so
every instance serves several at once; GPU utilisation over the whole run is about 0.6 at 16 cells); inside
each cell requests go to the least loaded instance (fresh signals). The run is in-process and writes no files; it prints wall and CPU seconds and
peak RSS of the whole process, the fleet's build time, the simulation's own share (compose to the last
event: ``sim_wall_s``, ``sim_cpu_s``, ``events``, events per second, RSS then), and the run's main figures.
If the tables at the end run out of memory, the simulation's figures are printed with the failure.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "scripts" / "results" / "bench_cells.txt"


def overrides(
    cells: int, per_cell: int, requests: int, rate_per_instance: float, policy: str, prefix_share: float | None
) -> list[str]:
    instances = cells * per_cell
    share = [] if prefix_share is None else [f"workload.prefix.share={prefix_share}"]
    return [*share,
        "cluster=cells_large",
        f"cluster.instances={instances}",
        f"cluster.cells.count={cells}",
        f"policy={policy}",
        "signals=fresh",
        f"workload.num_requests={requests}",
        f"workload.arrival.rate_rps={rate_per_instance * instances}",
        "sim.write_requests=false",
        "seed=0",
    ]


def rss_gb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in GB."""
    with open("/proc/self/status", encoding="ascii") as fh:
        now = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return round(now / 2**20, 2), round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


class Clock:
    """A probe (distsim.probe; duck-typed, so distsim is imported after the clocks start) that times the
    fleet's build (from the resolved scenario) and notes where the simulation ends and the tables begin."""

    def __init__(self, t0: tuple[float, float]):
        self.t0, self.figures = t0, {}

    def start(self) -> None:
        """The scenario is resolved: the build begins."""
        self.w, self.c = time.perf_counter(), time.process_time()

    def built(self, world, loop, recorder) -> None:
        self.figures["build_wall_s"] = round(time.perf_counter() - self.w, 2)
        self.figures["build_cpu_s"] = round(time.process_time() - self.c, 2)

    def ran(self, world, loop, recorder) -> None:
        self.figures["sim_wall_s"] = round(time.perf_counter() - self.t0[0], 1)  # compose, resolve, build, events
        self.figures["sim_cpu_s"] = round(time.process_time() - self.t0[1], 1)
        self.figures["events"] = loop.events
        self.figures["sim_rss_gb"], _ = rss_gb()

    def measured(self, result) -> None:
        """Nothing: the figures of the result are read by bench()."""


def bench(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter(), time.process_time()
    from distsim import load_config
    from distsim.resolve import resolve
    from distsim.simulate import run

    probe = Clock(t0)
    clock = probe.figures
    cfg = load_config(overrides(args.cells, args.per_cell, args.requests, args.rate_per_instance, args.policy, args.prefix_share))
    head = {"instances": args.cells * args.per_cell, "cells": args.cells, "requests": args.requests,
            "prefix_share": "default" if args.prefix_share is None else args.prefix_share}
    try:
        scenario = resolve(cfg)
        probe.start()
        result = run(scenario, started=t0, probe=probe)
    except MemoryError as err:  # the simulation's figures still say how far it got
        return {**head, **clock, "peak_rss_gb": rss_gb()[1], "failed": f"MemoryError after the simulation: {err}"}
    wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
    s = result.summary
    return {
        **head,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_gb": rss_gb()[1],
        **clock,
        "events_per_s": round(clock["events"] / clock["sim_wall_s"]),
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
    ap.add_argument("--prefix-share", type=float, default=None,
                    help="share of requests opening with a shared prompt (default: the workload's own, 0.8)")
    ap.add_argument("--policy", default="least_loaded", help="the routing policy inside each cell")
    ap.add_argument("--record", action="store_true", help=f"append the figures to {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--note", default="", help="e.g. whether other work shared the machine")
    args = ap.parse_args()
    figures = bench(args)
    command = (
        f"python scripts/bench_cells.py --cells {args.cells} --per-cell {args.per_cell} --requests {args.requests} "
        f"--rate-per-instance {args.rate_per_instance:g} --policy {args.policy}"
    )
    lines = [
        f"{datetime.date.today()}  {platform.machine()}  python {platform.python_version()}  {command}"
        + (f"  ({args.note})" if args.note else ""),
        "  " + "  ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in figures.items()),
    ]
    print("\n".join(lines))
    if args.record:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
