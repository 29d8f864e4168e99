"""The sweep driver: resume, compose each configuration once, run the jobs on Ray, write and rank.

The driver's per-job work is a dictionary look-up, one actor call and one small row: composing (about
100 ms with Hydra) happens once per distinct configuration, and the seed is set on a copy in the worker.
Outputs in the sweep directory: results.parquet, ranking.csv and sweep.json (all written atomically),
plus one directory per job written by the workers. The driver holds the directory for the whole sweep
(distsim.runner.claim: a lock, and the record of which sweep it holds). On Ctrl-C the tables of the jobs
that finished are written before SweepInterrupted is raised, so they are never lost.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from distsim import outputs
from distsim.runner import claim, faults, startup, store
from distsim.runner.compose import Composer, compose_all, compose_key
from distsim.runner.outcome import SweepOutcome
from distsim.runner.plan import Job, SweepPlan
from distsim.runner.pool import ActorPool, DriverTimes, PoolEvents
from distsim.runner.progress import Progress
from distsim.runner.ranking import rank_configs
from distsim.runner.rows import OUTPUT_FAILED, frame, retried_jobs
from distsim.runner.session import connect, probe, ray_initialised
from distsim.runner.settings import RunnerSettings
from distsim.runner.table import report_text
from distsim.runner.watchdog import Watchdog


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep, raised after the tables of the jobs that finished were written."""

    def __init__(self, sweep_dir: Path, finished: int, total: int):
        self.sweep_dir = sweep_dir
        self.finished = finished
        self.total = total
        done = (
            f"results of the {finished} of {total} jobs that finished are in {sweep_dir / store.RESULTS_FILE}"
            if finished
            else f"no job of {total} finished ({sweep_dir})"
        )
        super().__init__(f"sweep interrupted: {done}; run the same command again to resume")


def _exit_code(results: pd.DataFrame, strict: bool) -> int:
    failed = results[results["status"] != "ok"]
    if len(results) and len(failed) == len(results):
        return 2 if failed["error_kind"].isin(["user", OUTPUT_FAILED]).all() else 1
    if strict and len(failed):
        return 3
    return 0


def _on_row(progress: Progress, rows: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    def on_row(row: dict[str, Any]) -> None:
        rows.append(row)
        ok = row["status"] == "ok"
        progress.update(ok=int(ok), failed=int(not ok))
        if not ok:
            lead = "\n" if progress.tty else ""
            print(f"{lead}job {row['job']} [{row['overrides']}] failed: {row['error']}", file=sys.stderr)

    return on_row


def _on_retry(progress: Progress, tries: int) -> Callable[[Job, int, str], None]:
    def on_retry(job: Job, attempt: int, reason: str) -> None:
        lead = "\n" if progress.tty else ""
        print(
            f"{lead}job {job.index} [{job.overrides_str}]: {reason}; "
            f"its worker was replaced, try {attempt} of {tries}",
            file=sys.stderr,
        )

    return on_retry


def _actor_options(workers: int, cpus: int, settings: RunnerSettings) -> dict[str, Any]:
    """One CPU per actor (a share when there are more actors than CPUs), and Ray's worker niceness from
    runner.worker_niceness in the actors' runtime env, which Ray merges with the job's."""
    return {
        "num_cpus": 1.0 if workers <= cpus else cpus / workers,
        "runtime_env": {"env_vars": startup.worker_env(settings.worker_niceness)},
    }


def _execute(
    todo: list[Job],
    make_blobs: Callable[[], dict[str, bytes]],
    sweep_dir: Path,
    settings: RunnerSettings,
    progress: Progress,
    cwd: str,
    rows: list[dict[str, Any]],
) -> tuple[int, DriverTimes, int]:
    """Connect, start the actors, then compose (``make_blobs``) while they boot, and run the jobs.

    Each finished job's row is appended to ``rows`` at once, so an interrupted sweep keeps them."""
    times = DriverTimes()
    t0 = time.perf_counter()
    session = connect(settings.address, settings.ship_package, start_timeout_s=settings.start_timeout_s)  # before importing ray
    import ray

    pool = None
    try:
        workers = max(1, min(settings.num_workers or session.cpus, len(todo)))
        pool = ActorPool(
            workers, str(sweep_dir), {}, settings.max_retries, _actor_options(workers, session.cpus, settings),
            (cwd, faults.forwarded_env()),
            watchdog=Watchdog(settings.job_timeout_s),
        )  # fmt: skip
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
        events = PoolEvents(
            _on_row(progress, rows),
            lambda running: progress.update(running=running),
            _on_retry(progress, settings.max_retries + 1),
        )
        pool.run(todo, compose_key, events)
        return workers, times, pool.replaced
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
    records: Mapping[str, str] | None = None,
) -> SweepOutcome:
    """Run ``plan`` into ``sweep_dir``; see the module docstring. ``records`` are files (name: text) to
    write into the directory once it is claimed (the sweeper's multirun.yaml).

    Without a running Ray every configuration is composed first, so a bad override fails in a second,
    not after Ray's start-up; with Ray already up (the Python API, the search) the actors boot while the
    driver composes. Raises UserError (bad settings, an unreachable runner.address, a directory that is
    unwritable, in use or holds another sweep) and SweepInterrupted on Ctrl-C, after writing the tables
    of the jobs that finished.
    """
    settings.validate()
    t_start = time.perf_counter()
    cwd = os.getcwd()  # now: joining a cluster from inside a Ray job may swap the job's working dir
    if not ray_initialised():
        probe(settings.address)  # an unreachable cluster fails in a moment, before the directory is claimed
    sweep_dir = outputs.prepare_dir(Path(sweep_dir).resolve())
    with claim.claimed(sweep_dir, [job.overrides_str for job in plan.jobs], overwrite=settings.overwrite):
        for name, text in (records or {}).items():
            outputs.write_text(sweep_dir / name, text)
        return _run_claimed(plan, compose, sweep_dir, settings, echo=echo, t_start=t_start, cwd=cwd)


def _previous_rows(plan: SweepPlan, sweep_dir: Path) -> dict[int, dict[str, Any]]:
    previous: dict[int, dict[str, Any]] = {}
    for job in plan.jobs:
        row = store.finished_row(sweep_dir, job.index, job.overrides_str)
        if row is not None:
            previous[job.index] = row
    return previous


def _run_todo(
    plan: SweepPlan,
    todo: list[Job],
    compose: Composer,
    sweep_dir: Path,
    settings: RunnerSettings,
    cwd: str,
    rows: list[dict[str, Any]],
) -> tuple[int, int, DriverTimes]:
    """Compose and run the jobs not done yet, appending their rows; (workers, replaced, times)."""
    make_blobs = lambda: compose_all(todo, plan, compose)
    compose_s = 0.0
    if not ray_initialised():
        t0 = time.perf_counter()
        blobs = make_blobs()
        compose_s = time.perf_counter() - t0
        make_blobs = lambda: blobs
    progress = Progress(len(plan.jobs), skipped=len(plan.jobs) - len(todo), enabled=settings.progress)
    try:
        workers, times, replaced = _execute(todo, make_blobs, sweep_dir, settings, progress, cwd, rows)
    finally:
        progress.close()
    times.compose_s += compose_s
    return workers, replaced, times


def _tables(
    plan: SweepPlan, rows: list[dict[str, Any]], sweep_dir: Path, alpha: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """results.parquet and ranking.csv of the rows so far."""
    results = frame(rows)
    ranking = rank_configs(results, alpha, plan.config_texts())
    outputs.write_parquet(sweep_dir / store.RESULTS_FILE, results)
    outputs.write_csv(sweep_dir / store.RANKING_FILE, ranking)
    return results, ranking


def _run_claimed(
    plan: SweepPlan,
    compose: Composer,
    sweep_dir: Path,
    settings: RunnerSettings,
    *,
    echo: bool,
    t_start: float,
    cwd: str,
) -> SweepOutcome:
    previous = _previous_rows(plan, sweep_dir) if settings.resume else {}
    todo = [job for job in plan.jobs if job.index not in previous]
    if previous:
        print(
            f"sweep: resuming in {sweep_dir}: {len(previous)} of {len(plan.jobs)} jobs already done",
            file=sys.stderr,
        )
    rows, workers, replaced, times = list(previous.values()), 0, 0, DriverTimes()
    interrupted = False
    try:
        if todo:
            workers, replaced, times = _run_todo(plan, todo, compose, sweep_dir, settings, cwd, rows)
    except KeyboardInterrupt:
        interrupted = True
    if interrupted and not rows:
        raise SweepInterrupted(sweep_dir, 0, len(plan.jobs))
    t0 = time.perf_counter()
    results, ranking = _tables(plan, rows, sweep_dir, settings.alpha)
    times.finalize_s = time.perf_counter() - t0
    failed = int((results["status"] != "ok").sum())
    outcome = SweepOutcome(
        sweep_dir, results, ranking, len(plan.jobs), len(results) - failed, failed, len(previous), workers,
        time.perf_counter() - t_start, times, replaced, _exit_code(results, settings.strict), plan.config_texts(),
    )  # fmt: skip
    _write_meta(outcome, plan, settings, interrupted=interrupted)
    if interrupted:
        raise SweepInterrupted(sweep_dir, len(rows), len(plan.jobs))
    if echo:
        print(report_text(outcome, settings.alpha))
    return outcome


def _not_run(plan: SweepPlan, results: pd.DataFrame) -> tuple[list[int], list[str]]:
    """The jobs of the plan with no row (an interrupted sweep), and the configurations none of whose
    jobs ran, as their overrides."""
    ran = set(results["job"].astype(int)) if len(results) else set()
    jobs = [job.index for job in plan.jobs if job.index not in ran]
    ran_configs = set(results["config"]) if len(results) else set()
    configs = [" ".join(texts) for key, texts in plan.config_texts().items() if key not in ran_configs]
    return jobs, configs


def _write_meta(outcome: SweepOutcome, plan: SweepPlan, settings: RunnerSettings, *, interrupted: bool) -> None:
    jobs_not_run, configs_not_run = _not_run(plan, outcome.results)
    meta = {
        "interrupted": interrupted,
        "jobs": outcome.total,
        "configs": len(plan.configs()),
        "jobs_not_run": jobs_not_run,
        "configs_not_run": configs_not_run,
        "retried": {str(job): n for job, n in retried_jobs(outcome.results).items()},
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
    outputs.write_text(outcome.sweep_dir / store.SWEEP_FILE, json.dumps(meta, indent=2) + "\n")
