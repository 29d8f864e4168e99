"""Workload generation speed and memory: a million synthetic requests per config, and trace replay.

    python scripts/bench_workload.py [--n 1000000] [--traces]

Memory is the process's resident set sampled every 100k requests: it must stay flat (the stream never
holds more than a block of requests). With --traces it also replays the full public traces from
../shared/data and prints their prefix-reuse bounds.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distsim.workload import build_workload  # noqa: E402
from distsim.workload.traces.reuse import block_reuse, hash_id_reuse  # noqa: E402

CONFIGS = {
    "poisson fixed": {},
    "lognormal + tenants + classes": {
        "input_tokens": {"dist": "lognormal", "mu": 6.6, "sigma": 0.55, "max": 8192},
        "output_tokens": {"dist": "lognormal", "mu": 6.47, "sigma": 0.15},
        "tenants": {"count": 16, "zipf_s": 1.2},
        "slo": {
            "classes": [
                {"name": "interactive", "share": 0.7, "ttft_ms": 1000},
                {"name": "batch", "share": 0.3},
            ]
        },
    },
    "mmpp + prefix groups": {
        "arrival": {"process": "mmpp", "rates_rps": [5.0, 40.0], "dwell_s": [60.0, 10.0]},
        "prefix": {"groups": 16, "tokens": 2048, "share": 0.8},
    },
    "sessions": {"sessions": {"enabled": True, "max_context_tokens": 32768}},
}
TRACES = ["mooncake/conversation_trace.jsonl", "mooncake/synthetic_trace.jsonl"]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def run(name: str, cfg: dict, n: int) -> None:
    src = build_workload(dict(cfg, num_requests=n), seed=0, block_size=16)
    start_rss = rss_mb()
    samples = []
    t0 = time.perf_counter()
    count = 0
    for _ in src:
        count += 1
        if count % 100_000 == 0:
            samples.append(rss_mb())
    dt = time.perf_counter() - t0
    print(
        f"{name:32s} {count:>9,d} requests in {dt:6.2f} s ({count / dt / 1e6:5.2f} M/s)   "
        f"RSS start {start_rss:6.1f} MB, sampled min/max {min(samples):6.1f}/{max(samples):6.1f} MB"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--traces", action="store_true")
    args = ap.parse_args()
    for name, cfg in CONFIGS.items():
        run(name, cfg, args.n)
    print(f"peak RSS after generation {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0:.1f} MB")
    if args.traces:
        data = ROOT.parent / "shared" / "data"
        for rel in TRACES:
            path = data / rel
            t0 = time.perf_counter()
            src = build_workload(
                {"kind": "trace", "format": "mooncake", "path": str(path), "num_requests": None}, seed=0
            )
            b = block_reuse(src, 16)
            dt = time.perf_counter() - t0
            h = hash_id_reuse(path)
            print(
                f"{rel:36s} {src.describe()['rows']:>6,d} rows replayed in {dt:5.2f} s   reuse bound: "
                f"{h.fraction:.4f} (512-token hash ids), {b.fraction:.4f} (16-token engine blocks)"
            )
        print(
            f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0:.1f} MB (the reuse sets hold every key)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
