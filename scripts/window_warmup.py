"""The measurement-window result of docs/guide/features/windows.md: the embedded default at 4,000 requests
(Poisson 25 req/s for 160 s on 4 x H100, just under the knee) counted three ways: every request, after a 30
s warm-up, and in the window [30 s, 120 s). Prints a markdown table per seed (the same runs: a window
changes what is counted, never what is simulated), then, for the first seed, the plain run's requests by
arrival time in 15 s buckets, which shows where the start and the end flatter the figures.

    python scripts/window_warmup.py [--seeds 1] > scripts/results/window_warmup.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from distsim import load_config, simulate

BASE = ["workload.num_requests=4000"]
RUNS = {
    "every request": [],
    "warm-up 30 s": ["sim.warmup_s=30"],
    "window [30 s, 120 s)": ["sim.warmup_s=30", "sim.measure_s=90"],
}
HEAD = (
    "| run | seed | counted | TTFT mean / p99 ms | TPOT mean / p50 ms | E2E mean s | prefix hit rate | throughput req/s"
    " | out tok/s | fitness |"
)


def row(name: str, seed: int, s: dict) -> str:
    t, p, e = s["ttft_ms"], s["tpot_ms"], s["e2e_ms"]
    return (
        f"| {name} | {seed} | {s['requests']['arrived']:,} | {t['mean']:.1f} / {t['p99']:.1f} | {p['mean']:.1f} / {p['p50']:.1f}"
        f" | {e['mean'] / 1000:.2f} | {s['prefix_cache_hit_rate']:.3f} | {s['throughput']['requests_per_s']:.2f}"
        f" | {s['throughput']['output_tokens_per_s']:,.0f} | {s['fitness']:.3f} |"
    )


def buckets(requests, width_s: float = 15.0) -> list[str]:
    """Mean TTFT, TPOT, E2E and cached prompt tokens of the requests arriving in each ``width_s`` bucket."""
    which = (requests["arrival_ms"].to_numpy() // (width_s * 1000)).astype(int)
    lines = ["| arrival s | requests | TTFT mean ms | TPOT mean ms | E2E mean s | cached tokens mean |", "|---|---:|---:|---:|---:|---:|"]
    for b in np.unique(which):
        r = requests[which == b]
        lines.append(
            f"| {b * width_s:.0f}-{(b + 1) * width_s:.0f} | {len(r)} | {r['ttft_ms'].mean():.1f} | {r['tpot_ms'].mean():.1f}"
            f" | {r['e2e_ms'].mean() / 1000:.2f} | {r['cached_tokens'].mean():.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    print(HEAD)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    first = None
    for seed in range(args.seeds):
        for name, keys in RUNS.items():
            result = simulate(load_config([*BASE, *keys, f"seed={seed}"]))
            print(row(name, seed, result.summary), flush=True)
            first = first if first is not None or keys else result.requests
    print()
    print("\n".join(buckets(first)))


if __name__ == "__main__":
    main()
