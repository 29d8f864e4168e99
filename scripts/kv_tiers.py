"""The figures and plot of docs/guide/kv_tiers.md: what a storage tier below the CPU tier gives as it grows.

One H100 serving Llama-3.1-8B (the default engine and roofline3 step model) with its GPU cache held to 4,000
blocks (64,000 tokens) and a CPU KV tier of 4,000 blocks; every request opens with one of 64 shared
4,096-token prefixes (256 blocks each: 16,384 blocks in all, twice what GPU and CPU hold), picked with
Zipf(0.6) popularity, then a short lognormal user part; Poisson arrivals. The storage tier's capacity runs
from none to twice the prefixes' size, on the datasheet speeds (12 GB/s read, 7 GB/s write) and an assumed
100 us an operation. For each capacity: TTFT (mean, p90), the share of prompt tokens found on each tier and
the drive's traffic, averaged over the seeds. Prints a markdown table and writes the plot
(docs/guide/kv_tiers.png).

    python scripts/kv_tiers.py [--requests 1500] [--seeds 2] [--rate 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from distsim import load_config, simulate

ROOT = Path(__file__).resolve().parents[1]
BASE = [
    "cluster.instances=1", "cluster.model=llama-3.1-8b", "cluster.hardware=H100",
    "cluster.engine.total_kv_blocks=4000", "cluster.engine.max_model_len=16384", "cluster.engine.cpu_kv_blocks=4000",
    "workload.prefix.groups=64", "workload.prefix.tokens=4096", "workload.prefix.share=1.0",
    "workload.prefix.zipf_s=0.6", "workload.input_tokens.mu=5.0", "workload.input_tokens.sigma=0.8",
    "workload.input_tokens.max=2048", "workload.output_tokens.mu=5.0", "workload.output_tokens.sigma=0.6",
    "workload.output_tokens.max=1024", "cluster.engine.storage_kv.latency_us=100",
]
CAPACITIES = (0, 2000, 4000, 8000, 16000, 32000)  # the drive's blocks (2 MiB each for Llama-3.1-8B)


def figures(overrides: list[str]) -> dict[str, float]:
    s = simulate(load_config(overrides)).summary
    tiers = s.get("storage_kv")
    by_tier = tiers["hit_rate_by_tier"] if tiers else {"gpu": s["prefix_cache_hit_rate"] - s["cpu_kv"]["hit_rate"],
                                                       "cpu": s["cpu_kv"]["hit_rate"], "storage": 0.0}
    return {
        "ttft": s["ttft_ms"]["mean"], "ttft_p90": s["ttft_ms"]["p90"], "hit": s["prefix_cache_hit_rate"],
        "gpu": by_tier["gpu"], "cpu": by_tier["cpu"], "storage": by_tier["storage"],
        "read_gb": tiers["gb_moved"]["storage_read"] if tiers else 0.0,
        "written_gb": tiers["gb_moved"]["storage_written"] if tiers else 0.0,
        "dropped": tiers["dropped_blocks"] if tiers else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=3.0)
    parser.add_argument("--out", default=str(ROOT / "docs" / "guide" / "kv_tiers.png"))
    args = parser.parse_args()
    rows: dict[int, dict[str, float]] = {}
    for blocks in CAPACITIES:
        drive = [f"cluster.engine.storage_kv.capacity_blocks={blocks}"] if blocks else []
        runs = [
            figures([*BASE, *drive, f"workload.num_requests={args.requests}", f"workload.arrival.rate_rps={args.rate}",
                     f"seed={seed}"])
            for seed in range(args.seeds)
        ]
        rows[blocks] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    print("| drive blocks | TTFT mean ms | TTFT p90 ms | hit rate | GPU | CPU | storage | read GB | written GB | dropped |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for blocks, r in rows.items():
        print(f"| {blocks:,} | {r['ttft']:.1f} | {r['ttft_p90']:.1f} | {r['hit']:.3f} | {r['gpu']:.3f} | {r['cpu']:.3f}"
              f" | {r['storage']:.3f} | {r['read_gb']:.1f} | {r['written_gb']:.1f} | {r['dropped']:.0f} |")
    plot(rows, args.out)


def plot(rows: dict[int, dict[str, float]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{b // 1000}k" if b else "off" for b in rows]
    x = np.arange(len(labels))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(x, [r["ttft"] for r in rows.values()], marker="o", label="mean")
    ax1.plot(x, [r["ttft_p90"] for r in rows.values()], marker="o", label="p90")
    ax1.set_xticks(x, labels)
    ax1.set_xlabel("storage tier capacity (blocks of 16 tokens, 2 MiB)")
    ax1.set_ylabel("TTFT (ms)")
    ax1.legend()
    bottom = np.zeros(len(labels))
    for tier, colour in (("gpu", "tab:green"), ("cpu", "tab:blue"), ("storage", "tab:orange")):
        values = np.array([r[tier] for r in rows.values()])
        ax2.bar(x, values, bottom=bottom, label=tier.upper() if tier != "storage" else "storage", color=colour)
        bottom += values
    ax2.set_xticks(x, labels)
    ax2.set_xlabel("storage tier capacity (blocks)")
    ax2.set_ylabel("share of prompt tokens not computed")
    ax2.legend()
    fig.suptitle("Llama-3.1-8B on one H100: 4k GPU + 4k CPU blocks, 64 shared 4,096-token prefixes (distsim)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
