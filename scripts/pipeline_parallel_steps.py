"""The step-time table and plot of docs/guide/pipeline_parallel.md: a decode step against the batch size, with
and without pipeline stages.

Llama-3.1-70B on H100 (roofline3, defaults), TP4, TP4 x PP2, TP8 and TP8 x PP2 (the stages on two nodes):
the decode step of ``b`` sequences at 1,000 tokens of context each, as the engine prices it (a round of
``min(P, b)`` micro-batches through the stages), and the decode tokens per second per GPU it gives. Prints the
guide's table (one sequence at 600 tokens, 256 at 1,000) and writes the plot
(docs/guide/pipeline_parallel.png).

    python scripts/pipeline_parallel_steps.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distsim import load_config
from distsim.cluster.pools import resolve_pools
from distsim.instance.latency.base import StepShape

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {
    "TP4": (4, 1), "TP4 x PP2": (4, 2), "TP8": (8, 1), "TP8 x PP2": (8, 2),
}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 192, 256)
CONTEXT = 1000


def latency(tp: int, pp: int):
    cfg = load_config(["cluster=pipeline_parallel", "cluster.instances=1", f"cluster.engine.tensor_parallel_size={tp}",
                       f"cluster.engine.pipeline_parallel_size={pp}"])
    return resolve_pools(cfg.cluster)[0].latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "guide" / "pipeline_parallel.png"))
    args = parser.parse_args()
    models = {name: latency(tp, pp) for name, (tp, pp) in LAYOUTS.items()}
    print("| layout | GPUs | one sequence (600 tokens) | 256 sequences (1,000 each) |")
    print("|---|---:|---:|---:|")
    for name, lat in models.items():
        tp, pp = LAYOUTS[name]
        one = lat.step_us(StepShape(0, 0, 0, 1, 600)) / 1000
        full = lat.step_us(StepShape(0, 0, 0, 256, 256 * CONTEXT)) / 1000
        print(f"| {name} | {tp * pp} | {one:.2f} ms | {full:.2f} ms |")
    steps = {name: [lat.step_us(StepShape(0, 0, 0, b, b * CONTEXT)) for b in BATCHES] for name, lat in models.items()}
    plot(steps, args.out)


def plot(steps: dict[str, list[int]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for name, us in steps.items():
        tp, pp = LAYOUTS[name]
        ax1.plot(BATCHES, [u / 1000 for u in us], marker="o", label=name)
        ax2.plot(BATCHES, [b / (u / 1e6) / (tp * pp) for b, u in zip(BATCHES, us)], marker="o", label=name)
    ax1.set_xlabel("decoding sequences")
    ax1.set_ylabel("decode step (ms): each sequence's time per token")
    ax1.set_xscale("log", base=2)
    ax1.legend()
    ax2.set_xlabel("decoding sequences")
    ax2.set_ylabel("decode tokens/s per GPU")
    ax2.set_xscale("log", base=2)
    ax2.legend()
    fig.suptitle(f"Llama-3.1-70B on H100, decode at {CONTEXT:,} tokens of context: tensor and pipeline parallelism (distsim)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
