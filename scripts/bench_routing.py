"""Per-decision routing cost against cluster size (the aim: weighted scoring on 1,000 instances
stays in the tens of microseconds, because scores are numpy vectors over the candidates).

Builds a real cluster view (signal board, router counters, prefix index) over N idle instances with
live signals pushed, routes requests with block hashes, and reports microseconds per decision.

    python scripts/bench_routing.py            # N = 10, 100, 1000
"""

from __future__ import annotations

import argparse
import time

from distsim import load_config
from distsim.cluster.build import build_cluster
from distsim.events.loop import EventLoop
from distsim.metrics.recorder import Recorder
from distsim.request import Request
from distsim.resolve import resolve


def per_decision_us(n: int, policy: str, decisions: int) -> float:
    cfg = load_config([f"policy={policy}", f"cluster.instances={n}", "cluster.engine.total_kv_blocks=100000"])
    loop = EventLoop()
    sc = resolve(cfg, requests=[])
    cluster = build_cluster(sc.pools, sc.policy, sc.signals, sc.transfer, loop, Recorder(1e9, 1e9), seed=0, slo=sc.slo)
    view = cluster.entry_view
    reqs = [Request(i, 0, 1024, 64, block_hashes=tuple(range(i % 50, i % 50 + 64))) for i in range(decisions)]
    for r in reqs[:50]:  # warm the prefix index
        cluster.prefix_index and cluster.prefix_index.record(cluster.router.route(r, view), r.block_hashes)
    t0 = time.perf_counter()
    for r in reqs:
        choice = cluster.router.route(r, view)
        if cluster.prefix_index is not None:
            cluster.prefix_index.record(choice, r.block_hashes)
    return (time.perf_counter() - t0) / decisions * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decisions", type=int, default=2000)
    args = ap.parse_args()
    print(f"{'policy':<16}" + "".join(f"{f'N={n}':>12}" for n in (10, 100, 1000)) + "   (us per routing decision)")
    for policy in ("round_robin", "least_loaded", "prefix_affinity", "weighted"):
        row = [per_decision_us(n, policy, args.decisions) for n in (10, 100, 1000)]
        print(f"{policy:<16}" + "".join(f"{v:>12.1f}" for v in row))


if __name__ == "__main__":
    main()
