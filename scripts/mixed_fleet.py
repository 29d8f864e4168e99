"""The request-types result of docs/guide/features/request-types.md: the 70/20/10 LLM/vision/ASR mix
(workload=mixed_70_20_10, 3,000 requests, Poisson 36 req/s) on the mixed fleet (cluster=mixed_fleet: 4 x
H100 for Llama-3.1-8B, ViT-B/16 on one L40S, Whisper large-v3 on one H100, both runtimes timed by the
roofline service curve). Prints, per seed, each type's counts, SLO attainment, latency percentiles,
throughput and batch sizes; then, for the first seed, the ASR runtime's batching window swept (what a
longer window buys in batch size and costs in latency); and the vision runtime alone under load (only
vision requests, 20,000 of them, at 1,000 to 4,000 req/s, with a batching window of 0 and 2 ms), where
batching decides the capacity.

    python scripts/mixed_fleet.py [--seeds 3] > scripts/results/mixed_fleet.txt
"""

from __future__ import annotations

import argparse

from distsim import load_config, simulate

BASE = ["cluster=mixed_fleet", "workload=mixed_70_20_10"]
HEAD = ("| seed | type | requests | SLO met | latency p50 / p90 / p99 ms | TTFT p50 / p99 ms | throughput req/s"
        " (items/s) | batch items mean / p99 / max | requests per batch |")


def type_row(seed: int, name: str, t: dict) -> str:
    lat, thr = t["latency_ms"], t["throughput"]
    ttft = f"{t['ttft_ms']['p50']:.1f} / {t['ttft_ms']['p99']:.1f}" if "ttft_ms" in t else "-"
    items = f" ({thr['items_per_s']:.2f})" if "items_per_s" in thr else ""
    b = t.get("batches")
    batch = f"{b['items']['mean']:.2f} / {b['items']['p99']:.1f} / {b['items']['max']:.0f}" if b else "-"
    per = f"{b['requests']['mean']:.2f}" if b else "-"
    return (f"| {seed} | {name} | {t['requests']:,} | {t['slo_attainment']:.3f} | {lat['p50']:.1f} / {lat['p90']:.1f} / "
            f"{lat['p99']:.1f} | {ttft} | {thr['requests_per_s']:.2f}{items} | {batch} | {per} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("python scripts/mixed_fleet.py --seeds", args.seeds)
    print()
    print(HEAD)
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for seed in range(args.seeds):
        s = simulate(load_config([*BASE, f"seed={seed}"])).summary
        for name in ("llm", "vision", "asr"):
            print(type_row(seed, name, s["types"][name]))
        util = s["gpu_utilization"]
        print(f"| {seed} | all | {s['requests']['arrived']:,} | {s['goodput']['slo_attainment']:.3f} | | | "
              f"{s['throughput']['requests_per_s']:.2f} | GPU utilisation {util:.3f} | |")
    print()
    print("ASR runtime's batch_window_ms swept (seed 0; the other pools as configured):")
    print()
    print("| ASR window ms | latency p50 / p99 ms | batch items mean / max | SLO met |")
    print("|---:|---:|---:|---:|")
    for window in (0.0, 20.0, 100.0, 300.0):
        cfg = load_config(BASE)
        cfg.cluster.pools[2].runtime.batch_window_ms = window
        t = simulate(cfg).summary["types"]["asr"]
        print(f"| {window:g} | {t['latency_ms']['p50']:.1f} / {t['latency_ms']['p99']:.1f} | "
              f"{t['batches']['items']['mean']:.2f} / {t['batches']['items']['max']:.0f} | {t['slo_attainment']:.3f} |")
    vision_under_load()


def vision_under_load() -> None:
    """The vision runtime alone (ViT-B/16 on one L40S, up to 32 images, 2 slots) at rising rates (seed 0)."""
    print()
    print("Vision runtime alone under load (seed 0; workload.mix.llm=0, workload.mix.asr=0, 20,000 requests):")
    print()
    print("| offered req/s | window ms | latency p50 / p99 ms | images/s | batch items mean / p99 | SLO met |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rate in (1000, 2000, 3000, 4000):
        for window in (0.0, 2.0):
            cfg = load_config([*BASE, "workload.mix.llm=0", "workload.mix.asr=0", f"workload.arrival.rate_rps={rate}",
                               "workload.num_requests=20000"])
            cfg.cluster.pools[1].runtime.batch_window_ms = window
            t = simulate(cfg).summary["types"]["vision"]
            lat, b = t["latency_ms"], t["batches"]["items"]
            print(f"| {rate:,} | {window:g} | {lat['p50']:.1f} / {lat['p99']:.1f} | {t['throughput']['items_per_s']:,.0f} | "
                  f"{b['mean']:.1f} / {b['p99']:.0f} | {t['slo_attainment']:.3f} |")


if __name__ == "__main__":
    main()
