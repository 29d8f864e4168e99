"""Sweep speed: 40 short jobs on 2 Ray actors against the same jobs run one after another in-process.

    python scripts/bench_sweep.py                    # 2 policies x 20 seeds, 5000 requests each
    python scripts/bench_sweep.py --requests 20000 --seeds 10

The sequential baseline does a worker's work without Ray: compose each configuration once, then per
job set the seed, simulate and write the job's outputs. The sweep runs through distsim.runner.api
(the code path of `python -m distsim -m`), once Ray is up; Ray's own start-up is timed apart and also
reported as a cold-start figure. The driver's overhead per job (compose, submit, collect) comes from the
driver's own timers. Results go to stdout and scripts/results/bench_sweep_<requests>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from distsim import load_config
from distsim.runner.api import sweep
from distsim.runner.job import execute
from distsim.runner.overrides import texts
from distsim.runner.plan import plan_sweep
from distsim.runner.session import connect

RESULTS = Path(__file__).resolve().parent / "results"  # bench_sweep_<requests per job>.json


def sequential(args: list[str], out: Path) -> tuple[float, float]:
    """(seconds for all jobs, seconds of which composing) running each job in this process."""
    plan = plan_sweep(args)
    t0 = time.perf_counter()
    blobs = {key: pickle.dumps(load_config(texts(cfg))) for key, cfg in plan.configs().items()}
    compose_s = time.perf_counter() - t0
    for job in plan.jobs:
        row = execute(job, blobs[job.config_key], str(out))
        assert row["status"] == "ok", row["error"]
    return time.perf_counter() - t0, compose_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="alternate both sides this many times; medians")
    opts = parser.parse_args()
    args = [
        "workload=fixed", "policy=round_robin,random", f"seed=range({opts.seeds})", f"workload.num_requests={opts.requests}",
        "workload.arrival.rate_rps=20", "cluster.instances=2",
    ]  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="distsim-bench-"))
    try:
        t0 = time.perf_counter()
        load_config([args[0], *args[3:]])  # one configuration: no sweep parameters
        compose_one_ms = 1000 * (time.perf_counter() - t0)
        t0 = time.perf_counter()
        session = connect(None)  # the sweep's own local Ray: 127.0.0.1, no dashboard, nothing left behind
        ray_start_s = time.perf_counter() - t0
        seq_runs, sweep_runs = [], []
        for r in range(opts.repeat):  # alternate, so a burst of load elsewhere hits both sides alike
            seq_runs.append(sequential(args, work / f"sequential{r}"))
            t0 = time.perf_counter()
            outcome = sweep(args, work / f"sweep{r}", num_workers=opts.workers, progress=False, echo=False)
            sweep_runs.append((time.perf_counter() - t0, outcome))
            assert outcome.ok == len(outcome.results), outcome.results["error"].dropna().tolist()
        session.shutdown()
        seq_s, seq_compose_s = sorted(seq_runs)[len(seq_runs) // 2]
        sweep_s, outcome = sorted(sweep_runs, key=lambda x: x[0])[len(sweep_runs) // 2]
        n = len(outcome.results)
        per_job = outcome.times.per_job_ms()
        figures = {
            "jobs": n,
            "requests_per_job": opts.requests,
            "workers": outcome.workers,
            "cpus": os.cpu_count(),
            "repeats": opts.repeat,
            "load_avg_1min": round(os.getloadavg()[0], 2),
            "sequential_s": round(seq_s, 2),
            "sequential_runs_s": [round(x[0], 2) for x in seq_runs],
            "sequential_job_s": round((seq_s - seq_compose_s) / n, 3),
            "sweep_s": round(sweep_s, 2),
            "sweep_runs_s": [round(x[0], 2) for x in sweep_runs],
            "speedup": round(seq_s / sweep_s, 2),
            "ray_start_s": round(ray_start_s, 2),
            "speedup_cold": round(seq_s / (sweep_s + ray_start_s), 2),
            "actor_startup_s": round(outcome.times.startup_s, 3),
            "worker_job_s": round(float(outcome.results["run.wall_s"].mean()), 3),
            "worker_busy_fraction": round(
                float(outcome.results["run.wall_s"].sum()) / (outcome.workers * sweep_s), 3
            ),
            "driver_ms_per_job": per_job,
            "finalize_s": round(outcome.times.finalize_s, 3),
            "full_compose_ms": round(compose_one_ms, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{n} jobs of {opts.requests} requests, {outcome.workers} actors on {os.cpu_count()} CPUs "
        f"(1-min load average {figures['load_avg_1min']})"
    )
    print(
        f"  sequential in-process : {seq_s:6.2f} s  ({figures['sequential_job_s']:.3f} s per job)"
        f"  runs {figures['sequential_runs_s']}"
    )
    print(
        f"  sweep on Ray          : {sweep_s:6.2f} s  -> speed-up {figures['speedup']:.2f}x (Ray already up)"
        f"  runs {figures['sweep_runs_s']}"
    )
    print(
        f"  workers busy          : {figures['worker_busy_fraction']:.0%} of the sweep's wall time "
        f"({figures['worker_job_s']:.3f} s per job inside an actor)"
    )
    print(
        f"  + Ray start-up        : {ray_start_s:6.2f} s  -> speed-up {figures['speedup_cold']:.2f}x from cold"
    )
    print(
        f"  driver overhead / job : compose {per_job['compose']:.2f} ms, submit {per_job['submit']:.2f} ms, "
        f"collect {per_job['collect']:.2f} ms = {per_job['total']:.2f} ms "
        f"(one full Hydra compose: {compose_one_ms:.0f} ms)"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"bench_sweep_{opts.requests}.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
