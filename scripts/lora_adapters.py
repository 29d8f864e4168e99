"""The figures and plot of docs/guide/lora.md: how routing decides the adapter hit rate as adapters multiply.

Four H100s serving Llama-3.1-8B with LoRA on (conf/cluster/lora.yaml: 4 GPU slots of rank 16 per engine, 16
adapters cached in host memory, a 2 GB/s disk), the chat workload over N adapters of rank 16 with Zipf 1.0
popularity and 10% base-model requests (conf/workload/lora_zipf.yaml) at 12 req/s, routed round robin or by
the weighted router with lora_affinity 3 and queue_depth 1. For each N and policy: the adapter hit rate
(requests admitted with their adapter already in a slot), the loads from disk, and mean and p90 TTFT,
averaged over the seeds. Prints a markdown table and writes the plot (docs/guide/lora_adapters.png).

    python scripts/lora_adapters.py [--requests 800] [--seeds 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from distsim import load_config, simulate

ROOT = Path(__file__).resolve().parents[1]
BASE = ["cluster=lora", "workload=lora_zipf", "workload.arrival.rate_rps=12"]
POLICIES = {
    "round_robin": [],
    "lora_affinity": ["policy=weighted", "policy.routing.scorers={lora_affinity: 3, queue_depth: 1}"],
}
ADAPTERS = (2, 4, 8, 16, 32, 64)


def figures(overrides: list[str]) -> dict[str, float]:
    s = simulate(load_config(overrides)).summary
    return {"hit_rate": s["lora"]["hit_rate"], "disk_loads": s["lora"]["disk_loads"],
            "ttft": s["ttft_ms"]["mean"], "ttft_p90": s["ttft_ms"]["p90"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "docs" / "guide" / "lora_adapters.png"))
    args = parser.parse_args()
    table: dict[str, dict[int, dict[str, float]]] = {name: {} for name in POLICIES}
    for name, extra in POLICIES.items():
        for n in ADAPTERS:
            runs = [figures([*BASE, *extra, f"workload.lora.adapters={n}", f"workload.num_requests={args.requests}",
                             f"seed={seed}"]) for seed in range(args.seeds)]
            table[name][n] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    print("| adapters | " + " | ".join(f"{n}: hit rate / disk loads / TTFT mean ms / p90 ms" for n in POLICIES) + " |")
    print("|---:|" + "---:|" * len(POLICIES))
    for n in ADAPTERS:
        cells = [f"{t['hit_rate']:.3f} / {t['disk_loads']:.0f} / {t['ttft']:,.0f} / {t['ttft_p90']:,.0f}"
                 for t in (table[p][n] for p in POLICIES)]
        print(f"| {n} | " + " | ".join(cells) + " |")
    plot(table, args.out)


def plot(table: dict[str, dict[int, dict[str, float]]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for (name, rows), colour in zip(table.items(), ("tab:grey", "tab:blue")):
        ax1.plot(ADAPTERS, [rows[n]["hit_rate"] for n in ADAPTERS], marker="o", label=name, color=colour)
        ax2.plot(ADAPTERS, [rows[n]["ttft"] / 1000 for n in ADAPTERS], marker="o", label=name, color=colour)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("adapters in the catalog (Zipf 1.0)")
        ax.legend()
    ax1.set_ylabel("adapter hit rate")
    ax1.set_ylim(0, 1)
    ax2.set_ylabel("mean TTFT (s)")
    fig.suptitle("LoRA on 4 x H100, Llama-3.1-8B, max_loras 4, rank 16, 12 req/s (distsim)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
