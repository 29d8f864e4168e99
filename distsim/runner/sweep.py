"""The sweep driver: resume, compose each configuration once, run the jobs on Ray, write and rank.

The driver's per-job work is a dictionary look-up, one actor call and one small row: composing (about
100 ms with Hydra) happens once per distinct configuration, and the seed is set on a copy in the worker.
Outputs in the sweep directory: results.parquet, ranking.csv and sweep.json (all written atomically),
plus one directory per job written by the workers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from distsim.runner import faults, store
from distsim.runner.compose import Composer, compose_all, compose_key
from distsim.runner.plan import Job, SweepPlan
from distsim.runner.pool import ActorPool, DriverTimes, PoolEvents
from distsim.runner.progress import Progress
from distsim.runner.ranking import rank_configs
from distsim.runner.rows import frame
from distsim.runner.settings import RunnerSettings
from distsim.runner.table import report_text


@dataclass
class SweepOutcome:
    sweep_dir: Path
    results: pd.DataFrame
    ranking: pd.DataFrame
    total: int
    ok: int
    failed: int
    resumed: int
    workers: int
    wall_s: float
    times: DriverTimes = field(default_factory=DriverTimes)
    replaced_workers: int = 0
    exit_code: int = 0


def _exit_code(results: pd.DataFrame, strict: bool) -> int:
    failed = results[results["status"] != "ok"]
    if len(results) and len(failed) == len(results):
        return 2 if (failed["error_kind"] == "user").all() else 1
    if strict and len(failed):
        return 3
    return 0


def _ray_running() -> bool:
    import ray

    return ray.is_initialized()


def _on_row(progress: Progress) -> Callable[[dict[str, Any]], None]:
    def on_row(row: dict[str, Any]) -> None:
        ok = row["status"] == "ok"
        progress.update(ok=int(ok), failed=int(not ok))
        if not ok:
            lead = "\n" if progress.tty else ""
            print(f"{lead}job {row['job']} failed: {row['error']}", file=sys.stderr)

    return on_row


def _execute(
    todo: list[Job],
    make_blobs: Callable[[], dict[str, bytes]],
    sweep_dir: Path,
    settings: RunnerSettings,
    progress: Progress,
    cwd: str,
) -> tuple[list[dict[str, Any]], int, DriverTimes, int]:
    """Connect, start the actors, then compose (``make_blobs``) while they boot, and run the jobs."""
    import ray

    from distsim.runner.session import connect

    times = DriverTimes()
    t0 = time.perf_counter()
    session = connect(settings.address, settings.ship_package)
    pool = None
    try:
        workers = max(1, min(settings.num_workers or session.cpus, len(todo)))
        options: dict[str, Any] = {"num_cpus": 1.0 if workers <= session.cpus else session.cpus / workers}
        pool = ActorPool(
            workers, str(sweep_dir), {}, settings.max_retries, options, (cwd, faults.forwarded_env())
        )
        pool.times = times
        times.startup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        blobs = make_blobs()
        times.compose_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.config_refs = {key: ray.put(blob) for key, blob in blobs.items()}
        times.startup_s += time.perf_counter() - t0
        shipped = ", distsim shipped as py_modules" if session.shipped_package else ""
        print(
            f"sweep: {len(todo)} jobs on {workers} Ray workers ({session.address}, {session.nodes} node(s), "
            f"{session.cpus} CPUs{shipped}) -> {sweep_dir}",
            file=sys.stderr,
        )
        events = PoolEvents(_on_row(progress), lambda running: progress.update(running=running))
        rows = pool.run(todo, compose_key, events)
        return rows, workers, times, pool.replaced
    finally:
        if pool is not None:
            pool.close()
        session.shutdown()


def run_sweep(
    plan: SweepPlan,
    compose: Composer,
    sweep_dir: str | os.PathLike,
    settings: RunnerSettings,
    *,
    echo: bool = True,
) -> SweepOutcome:
    """Run ``plan`` into ``sweep_dir``; see the module docstring.

    Without a running Ray every configuration is composed first, so a bad override fails in a second,
    not after Ray's start-up; with Ray already up (the Python API, the search) the actors boot while the
    driver composes.
    """
    settings.validate()
    t_start = time.perf_counter()
    cwd = os.getcwd()  # now: joining a cluster from inside a Ray job may swap the job's working dir
    sweep_dir = Path(sweep_dir).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    previous: dict[int, dict[str, Any]] = {}
    if settings.resume:
        for job in plan.jobs:
            row = store.finished_row(sweep_dir, job.index, job.overrides_str)
            if row is not None:
                previous[job.index] = row
    todo = [job for job in plan.jobs if job.index not in previous]
    if previous:
        print(
            f"sweep: resuming in {sweep_dir}: {len(previous)} of {len(plan.jobs)} jobs already done",
            file=sys.stderr,
        )
    rows, workers, replaced, times = list(previous.values()), 0, 0, DriverTimes()
    if todo:
        make_blobs = lambda: compose_all(todo, plan, compose)
        compose_s = 0.0
        if not _ray_running():
            t0 = time.perf_counter()
            blobs = make_blobs()
            compose_s = time.perf_counter() - t0
            make_blobs = lambda: blobs
        progress = Progress(len(plan.jobs), skipped=len(previous), enabled=settings.progress)
        new_rows, workers, times, replaced = _execute(todo, make_blobs, sweep_dir, settings, progress, cwd)
        times.compose_s += compose_s
        progress.close()
        rows += new_rows
    t0 = time.perf_counter()
    results = frame(rows)
    ranking = rank_configs(results, settings.alpha)
    store.write_table(sweep_dir / store.RESULTS_FILE, results)
    store.write_table(sweep_dir / store.RANKING_FILE, ranking)
    times.finalize_s = time.perf_counter() - t0
    failed = int((results["status"] != "ok").sum())
    outcome = SweepOutcome(
        sweep_dir,
        results,
        ranking,
        len(plan.jobs),
        len(results) - failed,
        failed,
        len(previous),
        workers,
        time.perf_counter() - t_start,
        times,
        replaced,
        _exit_code(results, settings.strict),
    )
    _write_meta(outcome, plan, settings)
    if echo:
        print(report_text(outcome, settings.alpha))
    return outcome


def _write_meta(outcome: SweepOutcome, plan: SweepPlan, settings: RunnerSettings) -> None:
    meta = {
        "jobs": outcome.total,
        "configs": len(plan.configs()),
        "swept": list(plan.swept_keys),
        "ok": outcome.ok,
        "failed": outcome.failed,
        "resumed": outcome.resumed,
        "workers": outcome.workers,
        "address": settings.address or "local",
        "replaced_workers": outcome.replaced_workers,
        "wall_s": round(outcome.wall_s, 3),
        "driver_ms_per_job": outcome.times.per_job_ms(),
        "startup_s": round(outcome.times.startup_s, 3),
        "finalize_s": round(outcome.times.finalize_s, 3),
    }
    store.atomic_write_text(outcome.sweep_dir / store.SWEEP_FILE, json.dumps(meta, indent=2) + "\n")
