"""The MIG result of docs/guide/features/mig.md (the seed's experiment): the same 8 x H100 with 0% and 50% of
the GPUs sliced, under one workload (the default chat workload at a rate scaled to 8 GPUs, seeds 0-2, the
same request stream per seed for every fleet). Fleets:

- llama-3.1-8b on 8 whole GPUs, and on 4 whole + 4 cut into two 3g.40gb each (conf/cluster/mig_mixed.yaml);
  the same model on 1g.20gb or 1g.10gb slices is refused (its weights plus one 131,072-token sequence do
  not fit), and the refusals are printed;
- qwen2.5-7b (32K context) on 8 whole GPUs, and on 4 whole + 4 cut into four 1g.20gb each.

Routing: least_loaded; the weighted router with llm-d's scorers (3/2/2); and on the sliced fleets the same
plus mig_penalty at weight 2 (long prompts to whole GPUs; on whole GPUs alone it would score every instance 1). Prints markdown tables: packing (instances and KV tokens per
GPU) and per rate the mean over the seeds of TTFT and E2E p99, goodput, goodput per GPU and per dollar-hour.

    python scripts/mig_experiment.py [--seeds 3] [--requests 3000] > scripts/results/mig_experiment.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.resolve import resolve

LEAST = ["policy=least_loaded"]
WEIGHTED = ["policy=weighted", "policy.routing.scorers.mig_penalty=2"]
SLICED = ["cluster=mig_mixed"]
FLEETS = {
    "llama-3.1-8b, 0% sliced (8 whole), least_loaded": ["cluster.instances=8", *LEAST],
    "llama-3.1-8b, 0% sliced (8 whole), weighted": ["cluster.instances=8", "policy=weighted"],
    "llama-3.1-8b, 50% sliced (4 whole + 8 x 3g.40gb), least_loaded": [*SLICED, *LEAST],
    "llama-3.1-8b, 50% sliced (4 whole + 8 x 3g.40gb), weighted": [*SLICED, "policy=weighted"],
    "llama-3.1-8b, 50% sliced (4 whole + 8 x 3g.40gb), weighted + mig_penalty": [*SLICED, *WEIGHTED],
    "qwen2.5-7b, 0% sliced (8 whole), least_loaded": ["cluster.model=qwen2.5-7b", "cluster.instances=8", *LEAST],
    "qwen2.5-7b, 0% sliced (8 whole), weighted": ["cluster.model=qwen2.5-7b", "cluster.instances=8", "policy=weighted"],
    "qwen2.5-7b, 50% sliced (4 whole + 16 x 1g.20gb), least_loaded": [
        *SLICED, "cluster.model=qwen2.5-7b", "cluster.pools.1.count=16", "cluster.pools.1.mig.profile=1g.20gb", *LEAST,
    ],
    "qwen2.5-7b, 50% sliced (4 whole + 16 x 1g.20gb), weighted": [
        *SLICED, "cluster.model=qwen2.5-7b", "cluster.pools.1.count=16", "cluster.pools.1.mig.profile=1g.20gb",
        "policy=weighted",
    ],
    "qwen2.5-7b, 50% sliced (4 whole + 16 x 1g.20gb), weighted + mig_penalty": [
        *SLICED, "cluster.model=qwen2.5-7b", "cluster.pools.1.count=16", "cluster.pools.1.mig.profile=1g.20gb", *WEIGHTED,
    ],
}
REFUSED = {
    "llama-3.1-8b on 1g.20gb": [*SLICED, "cluster.pools.1.count=16", "cluster.pools.1.mig.profile=1g.20gb"],
    "llama-3.1-8b on 1g.10gb": [*SLICED, "cluster.pools.1.count=28", "cluster.pools.1.mig.profile=1g.10gb"],
    "qwen2.5-7b on 1g.10gb": [*SLICED, "cluster.model=qwen2.5-7b", "cluster.pools.1.count=28",
                              "cluster.pools.1.mig.profile=1g.10gb"],
}
GPUS = 8


def figures(overrides: list[str]) -> dict[str, float]:
    r = simulate(load_config(overrides))
    s, inst = r.summary, r.instances
    dollars_per_hour = float((inst["price_usd_per_gpu_hour"] * inst["gpus"]).sum())
    return {
        "instances": len(inst),
        "kv_per_gpu": float(inst["total_kv_blocks"].sum()) * 16 / GPUS,
        "ttft_p99": s["ttft_ms"]["p99"],
        "e2e_p99": s["e2e_ms"]["p99"],
        "tpot_p99": s["tpot_ms"]["p99"],
        "goodput": s["goodput"]["requests_per_s"],
        "slo": s["goodput"]["slo_attainment"],
        "per_gpu": s["fitness"],
        "per_dollar_hour": s["goodput"]["requests_per_s"] / dollars_per_hour,
        "dropped": s["requests"]["dropped"],
    }


def refusals() -> None:
    print("Refused before simulating (one ConfigError each):\n")
    for name, overrides in REFUSED.items():
        try:
            resolve(load_config(overrides))
            print(f"- {name}: accepted (unexpected)")
        except ConfigError as err:
            print(f"- {name}: `{err}`")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rates", default="40,60")
    args = parser.parse_args()
    refusals()
    for rate in [float(x) for x in args.rates.split(",")]:
        print(f"Default chat workload at {rate:g} req/s, {args.requests} requests, seeds 0-{args.seeds - 1} (means):\n")
        print("| fleet | instances | KV tokens per GPU | TTFT p99 ms | E2E p99 ms | TPOT p99 ms | goodput req/s | "
              "SLO attainment | goodput per GPU | goodput per $/h | dropped |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, extra in FLEETS.items():
            load = [f"workload.arrival.rate_rps={rate}", f"workload.num_requests={args.requests}"]
            runs = [figures([*extra, *load, f"seed={seed}"]) for seed in range(args.seeds)]
            m = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            print(f"| {name} | {m['instances']:.0f} | {m['kv_per_gpu']:,.0f} | {m['ttft_p99']:,.0f} | "
                  f"{m['e2e_p99']:,.0f} | {m['tpot_p99']:.1f} | {m['goodput']:.2f} | {m['slo']:.3f} | "
                  f"{m['per_gpu']:.3f} | {m['per_dollar_hour']:.3f} | {m['dropped']:.1f} |")
        print()


if __name__ == "__main__":
    main()
