"""The windowed-batching result of docs/guide/features/windowed-batching.md: windowed against continuous
prefill batching on one workload.

Short prompts (fixed 256 input and 64 output tokens, Poisson, 3,000 requests) on the P/D cluster
(conf/cluster/pd_disagg.yaml: 2 prefill + 2 decode H100s, Llama-3.1-8B), where a prefill instance has no
decoders to share its steps with, and on the default mixed cluster (4 x H100); each at a rate below its
knee and one above. Continuous batching against two (prefill_batch_min, prefill_batch_window_ms)
settings, on the same requests (the workload's streams do not depend on the engine); then the embedded
default workload (ShareGPT-like prompts, most over the 2,048-token step budget) on the default cluster.
Per run: TTFT and TPOT mean / p99, throughput, the busy time and steps of the instances that prefill
(every instance of a mixed cluster, the prefill pool of P/D), and the prefill
batches (the new prompts an instance starts at one instant) with their mean size; with a window, the
share of batches closed by the window's end and the mean hold.

    python scripts/bench_windowed.py [--seeds 3] > scripts/results/bench_windowed.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from distsim import load_config, simulate

SETTINGS = {  # name -> (prefill_batch_min, prefill_batch_window_ms); None: continuous batching
    "continuous": None,
    "min 4, 10 ms": (4, 10),
    "min 8, 25 ms": (8, 25),
}
SHORT = ["workload=fixed", "workload.num_requests=3000", "workload.input_tokens.value=256", "workload.output_tokens.value=64"]
# (cluster, workload overrides, rate req/s): short prompts below and above each cluster's knee, then the
# embedded default workload (ShareGPT-like prompts, most with a 2,048-token system prompt) at its 25 req/s
SCENARIOS = [
    ("pd_disagg", SHORT, 200.0),
    ("pd_disagg", SHORT, 400.0),
    ("default", SHORT, 300.0),
    ("default", SHORT, 700.0),
    ("default", ["workload=default", "workload.num_requests=3000"], 25.0),
]
HEAD = (
    "| cluster, workload | rate req/s | batching | seed | TTFT mean / p99 ms | TPOT mean / p99 ms | throughput req/s"
    " | busy s | steps | prefill batches | prompts per batch | closed by window | hold mean ms |"
)


def overrides(cluster: str, workload: list[str], rate: float, seed: int, setting: tuple[int, int] | None) -> list[str]:
    out = [f"cluster={cluster}", *workload, f"workload.arrival.rate_rps={rate}", f"seed={seed}"]
    if setting is not None:
        out += [f"cluster.engine.prefill_batch_min={setting[0]}", f"cluster.engine.prefill_batch_window_ms={setting[1]}"]
    return out


def prefill_batches(requests) -> tuple[int, float]:
    """Admissions (distinct first-scheduling instants per prefilling instance) and the prompts each started."""
    started = np.round((requests["arrival_ms"] + requests["queue_ms"]).to_numpy() * 1000).astype(np.int64)
    where = np.where(requests["prefill_instance"] >= 0, requests["prefill_instance"], requests["instance"])
    batches = len(set(zip(where.tolist(), started.tolist())))
    return batches, len(requests) / batches


def figures(result) -> dict[str, float]:
    """One run's figures (the instances that prefill: every instance of a mixed cluster, P/D's prefill pool)."""
    s, inst = result.summary, result.instances
    inst = inst[inst["role"] != "decode"]
    batches, per = prefill_batches(result.requests[result.requests["status"] == "completed"])
    out = {
        "ttft_mean": s["ttft_ms"]["mean"], "ttft_p99": s["ttft_ms"]["p99"], "tpot_mean": s["tpot_ms"]["mean"],
        "tpot_p99": s["tpot_ms"]["p99"], "rps": s["throughput"]["requests_per_s"], "busy_s": inst["busy_ms"].sum() / 1000,
        "steps": inst["steps"].sum(), "batches": batches, "per": per, "closed": np.nan, "hold": np.nan,
    }
    if "prefill_batches" in inst.columns:
        held = inst["prefill_batch_held"].to_numpy()
        out["closed"] = inst["prefill_batches_expired"].sum() / inst["prefill_batches"].sum()
        out["hold"] = (inst["prefill_batch_hold_ms"].to_numpy() * held).sum() / held.sum()
    return out


def row(label: str, rate: float, name: str, seed: str, f: dict[str, float]) -> str:
    closed, hold = ("-", "-") if np.isnan(f["closed"]) else (f"{f['closed']:.2f}", f"{f['hold']:.1f}")
    return (
        f"| {label} | {rate:g} | {name} | {seed} | {f['ttft_mean']:.1f} / {f['ttft_p99']:.1f}"
        f" | {f['tpot_mean']:.2f} / {f['tpot_p99']:.2f} | {f['rps']:.1f} | {f['busy_s']:.1f} | {f['steps']:,.0f}"
        f" | {f['batches']:,.0f} | {f['per']:.2f} | {closed} | {hold} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    rule = "|---|" + "---:|" * (HEAD.count("|") - 2)
    print(HEAD)
    print(rule)
    means = []
    for cluster, workload, rate in SCENARIOS:
        label = f"{cluster}, {'short' if workload is SHORT else 'default'}"
        for name, setting in SETTINGS.items():
            runs = []
            for seed in range(args.seeds):
                result = simulate(load_config(overrides(cluster, workload, rate, seed, setting)))
                assert result.summary["requests"]["completed"] == 3000
                runs.append(figures(result))
                print(row(label, rate, name, str(seed), runs[-1]), flush=True)
            means.append(row(label, rate, name, f"mean of {args.seeds}", {k: np.mean([r[k] for r in runs]) for k in runs[0]}))
    print()
    print(HEAD)
    print(rule)
    print("\n".join(means))


if __name__ == "__main__":
    main()
