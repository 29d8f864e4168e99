"""What stale signals cost (the aim: a 100 ms refresh costs at most 1.3x the CPU of live signals).
Runs the same loaded cluster with live signals and with scrapes every 100 ms / 1 s, for a signal-reading policy, and reports CPU seconds (best of --repeat) and the ratio.

    python scripts/bench_signals.py
"""

from __future__ import annotations

import argparse

from distsim import load_config, simulate


def cpu(overrides: list[str], repeat: int) -> float:
    cfg = load_config(overrides)
    return min(simulate(cfg).perf["cpu_s"] for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = ["workload=fixed", "cluster.instances=16", "workload.arrival.rate_rps=80", f"workload.num_requests={args.requests}"]
    for policy in ("least_loaded", "weighted"):
        live = cpu([*base, f"policy={policy}"], args.repeat)
        for interval in (100, 1000):
            stale = cpu([*base, f"policy={policy}", f"signals.refresh_interval_ms={interval}"], args.repeat)
            print(f"{policy:<14} live {live:.2f} s   refresh {interval:>4} ms {stale:.2f} s   ratio {stale / live:.2f}")


if __name__ == "__main__":
    main()
