"""The figures and plot of docs/guide/speculative.md: when speculative decoding pays as load grows.

One H100 serving Llama-3.1-8B (the default engine and roofline3 step model), Poisson arrivals of fixed
1,024-token prompts and 256-token answers at a range of rates, with speculation off and with an EAGLE head
drafting k = 3 tokens at two acceptance rates (0.8, the EAGLE paper's, and 0.6). For each rate and setting:
mean TPOT, mean E2E and the output tokens per second served, averaged over the seeds. Prints a markdown
table and writes the plot (docs/guide/speculative_load.png).

    python scripts/speculative_load.py [--requests 1000] [--seeds 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from distsim import load_config, simulate

ROOT = Path(__file__).resolve().parents[1]
BASE = [
    "cluster.instances=1", "cluster.model=llama-3.1-8b", "cluster.hardware=H100", "workload=fixed",
    "workload.input_tokens.dist=fixed", "workload.input_tokens.value=1024",
    "workload.output_tokens.dist=fixed", "workload.output_tokens.value=256", "workload.arrival.process=poisson",
]
SETTINGS = {
    "off": [],
    "EAGLE k=3, a=0.8": ["cluster.engine.speculative.method=eagle", "cluster.engine.speculative.acceptance_rate=0.8"],
    "EAGLE k=3, a=0.6": ["cluster.engine.speculative.method=eagle", "cluster.engine.speculative.acceptance_rate=0.6"],
}
RATES = (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)


def figures(overrides: list[str]) -> dict[str, float]:
    s = simulate(load_config(overrides)).summary
    return {"tpot": s["tpot_ms"]["mean"], "e2e": s["e2e_ms"]["mean"], "tok_s": s["throughput"]["output_tokens_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "docs" / "guide" / "speculative_load.png"))
    args = parser.parse_args()
    table: dict[str, dict[int, dict[str, float]]] = {name: {} for name in SETTINGS}
    for name, extra in SETTINGS.items():
        for rate in RATES:
            runs = [
                figures([*BASE, *extra, f"workload.num_requests={args.requests}", f"workload.arrival.rate_rps={rate}",
                         f"seed={seed}"])
                for seed in range(args.seeds)
            ]
            table[name][rate] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    print("| rate req/s | " + " | ".join(f"{n}: TPOT ms / E2E ms / tok/s" for n in SETTINGS) + " |")
    print("|---:|" + "---:|" * len(SETTINGS))
    for rate in RATES:
        cells = [f"{t['tpot']:.2f} / {t['e2e']:,.0f} / {t['tok_s']:,.0f}" for t in (table[n][rate] for n in SETTINGS)]
        print(f"| {rate} | " + " | ".join(cells) + " |")
    plot(table, args.out)


def plot(table: dict[str, dict[int, dict[str, float]]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    off = table["off"]
    for (name, rows), colour in zip(table.items(), ("tab:grey", "tab:blue", "tab:orange")):
        ax1.plot(RATES, [rows[r]["e2e"] / 1000 for r in RATES], marker="o", label=name, color=colour)
        if name != "off":
            ax2.plot(RATES, [off[r]["e2e"] / rows[r]["e2e"] for r in RATES], marker="o", label=name, color=colour)
    ax1.set_xlabel("offered load (requests/s)")
    ax1.set_ylabel("mean E2E latency (s)")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.axhline(1.0, color="black", lw=1)
    ax2.set_xlabel("offered load (requests/s)")
    ax2.set_ylabel("speed-up of mean E2E (off / on)")
    ax2.legend()
    fig.suptitle("Speculative decoding on one H100, Llama-3.1-8B, 1,024 in / 256 out (distsim)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
