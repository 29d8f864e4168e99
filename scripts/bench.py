"""The standard speed benchmark.

16 x H100, Llama-3.1-8B, TP1, roofline, round_robin, Poisson at 100 req/s, fixed 512 input and 512
output tokens, max_num_batched_tokens 2048, 50,000 requests. Runs the scenario in-process (the
simulation alone) and through the CLI (the whole process: imports, composition, workload, outputs),
and prints wall time, CPU time, events/s, simulated requests per CPU-second and peak memory.

    python scripts/bench.py               # both
    python scripts/bench.py --requests 10000 --no-cli
    python scripts/bench.py --record      # also append the figures to scripts/results/bench.jsonl
    python scripts/bench.py --workload default   # the same scenario on the default workload
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


FIXED = [
    "workload=fixed",
    "workload.input_tokens.dist=fixed",
    "workload.input_tokens.value=512",
    "workload.output_tokens.dist=fixed",
    "workload.output_tokens.value=512",
]


def overrides(n: int, workload: str = "fixed") -> list[str]:
    """The standard scenario; ``workload="default"`` keeps the embedded default's lengths and shared
    prompts (80% of requests open with one of 400 shared 2,048-token prompts) at the same arrivals."""
    return [
        "cluster.model=llama-3.1-8b",
        "cluster.hardware=H100",
        "cluster.instances=16",
        "cluster.engine.tensor_parallel_size=1",
        "cluster.engine.max_num_batched_tokens=2048",
        "cluster.latency.kind=roofline",
        "policy=round_robin",
        *(FIXED if workload == "fixed" else []),
        "workload.kind=synthetic",
        "workload.arrival.process=poisson",
        "workload.arrival.rate_rps=100",
        f"workload.num_requests={n}",
        "seed=0",
    ]


def in_process(n: int, workload: str = "fixed") -> dict:
    from distsim import load_config, simulate

    cfg = load_config(overrides(n, workload))
    result = simulate(cfg)
    perf = dict(result.perf)
    perf["completed"] = result.summary["requests"]["completed"]
    perf["simulated_s"] = result.summary["sim"]["simulated_s"]
    return perf


def through_cli(n: int, workload: str = "fixed") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "distsim", *overrides(n, workload), f"hydra.run.dir={tmp}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"CLI failed:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mb": round(after.ru_maxrss / 1024.0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--workload", choices=("fixed", "default"), default="fixed",
                    help="fixed 512/512 (the standard benchmark) or the embedded default's (shared prompts)")
    args = ap.parse_args()

    sim = in_process(args.requests, args.workload)
    print(f"in-process   wall {sim['wall_s']:.2f} s   cpu {sim['cpu_s']:.2f} s   events/s {sim['events_per_s']:,.0f}   "
          f"requests/cpu-s {sim['requests_per_cpu_s']:,.0f}   peak rss {sim['peak_rss_mb']:.0f} MB   "
          f"({sim['events']:,} events, {sim['completed']:,} completed, {sim['simulated_s']:.1f} s simulated)")
    record = {"requests": args.requests, "workload": args.workload, "in_process": sim, "machine": platform.machine(), "python": platform.python_version()}
    if not args.no_cli:
        cli = through_cli(args.requests, args.workload)
        print(f"CLI process  wall {cli['wall_s']:.2f} s   cpu {cli['cpu_s']:.2f} s   peak rss {cli['peak_rss_mb']:.0f} MB")
        record["cli"] = cli
    if args.record:
        out = ROOT / "scripts" / "results" / "bench.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        record["date"] = time.strftime("%Y-%m-%d")
        with out.open("a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
