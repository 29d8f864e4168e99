"""A sweep directory belongs to one sweep, and to one driver at a time.

Why: a second, different sweep into the same ``hydra.sweep.dir`` would overwrite the first one's job
directories and tables and leave the rest of them orphaned beside its own, and two drivers of the same
sweep at once would both run every job. So the driver

- takes an exclusive lock on LOCK_FILE (``fcntl.flock``: released when the process ends, however it
  ends, so a crashed driver never leaves a stale lock) and refuses to start while another driver holds it;
- records the sweep in ID_FILE before the first job runs (every job's overrides, in job order; runner.*
  settings are not part of it, as they are not part of a job), resumes a directory that records the same
  sweep, and refuses a different one with one line, unless ``runner.overwrite`` is set: then the other
  sweep's job directories and tables are deleted first.

A directory from before ID_FILE existed is judged by its jobs' result.json files.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from distsim import outputs
from distsim.errors import OutputError, UserError, os_reason
from distsim.runner import store

LOCK_FILE = ".sweep.lock"
ID_FILE = "sweep_id.json"
RECORDS = (store.RESULTS_FILE, store.RANKING_FILE, store.SWEEP_FILE, ID_FILE, "multirun.yaml")
REPORT_DIR = "report"


def _lock(sweep_dir: Path) -> IO[str]:
    path = sweep_dir / LOCK_FILE
    try:
        handle = open(path, "a", encoding="utf-8")
    except OSError as err:
        raise OutputError(str(path), f"cannot open the sweep's lock file ({os_reason(err)})") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UserError(
            f"sweep error: {sweep_dir} is in use by another sweep driver (it holds {LOCK_FILE}); "
            "wait for it to finish, or choose another hydra.sweep.dir"
        ) from None
    return handle


def _job_dirs(sweep_dir: Path) -> list[Path]:
    return [p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]


def recorded_jobs(sweep_dir: Path) -> list[str] | str | None:
    """The overrides of every job of the sweep the directory records; None when it records none, and
    a description instead when the record is unreadable (the directory holds some sweep, not known which)."""
    path = sweep_dir / ID_FILE
    if not path.exists():
        return None
    try:
        jobs = json.loads(path.read_text(encoding="utf-8"))["jobs"]
    except (OSError, ValueError, KeyError, TypeError):
        jobs = None
    return [str(j) for j in jobs] if isinstance(jobs, list) else f"its {ID_FILE} is unreadable"


def _legacy_conflict(sweep_dir: Path, jobs: Sequence[str]) -> str | None:
    """For a directory without ID_FILE: the first finished job whose overrides are not this sweep's."""
    for job in sorted(_job_dirs(sweep_dir), key=lambda p: int(p.name)):
        row = store.read_result(job)
        if row is None:
            continue
        index = int(job.name)
        mine = jobs[index] if index < len(jobs) else None
        if row.get("overrides") != mine:
            return f"its job {index} ran '{row.get('overrides')}'" + (f", this sweep's is '{mine}'" if mine else "")
    return None


def _difference(old: Sequence[str], new: Sequence[str]) -> str:
    for index, (a, b) in enumerate(zip(old, new)):
        if a != b:
            return f"its job {index} is '{a}', this sweep's is '{b}'"
    return f"it has {len(old)} jobs, this sweep {len(new)}"


def clear(sweep_dir: Path) -> None:
    """Delete what a sweep wrote here: job directories, tables, records and the report."""
    try:
        for job in _job_dirs(sweep_dir):
            shutil.rmtree(job)
        report = sweep_dir / REPORT_DIR
        if report.is_dir():
            shutil.rmtree(report)
    except OSError as err:
        raise OutputError(str(sweep_dir), f"cannot delete the previous sweep ({os_reason(err)})") from None
    outputs.remove(sweep_dir / name for name in RECORDS)


def _claim(sweep_dir: Path, jobs: list[str], overwrite: bool) -> None:
    old = recorded_jobs(sweep_dir)
    if old == jobs:
        return
    if isinstance(old, str):
        conflict: str | None = old
    else:
        conflict = _difference(old, jobs) if old is not None else _legacy_conflict(sweep_dir, jobs)
    if conflict is not None:
        if not overwrite:
            raise UserError(
                f"sweep error: {sweep_dir} holds another sweep ({conflict}); choose another "
                "hydra.sweep.dir, or set runner.overwrite=true to replace it"
            )
        clear(sweep_dir)
    outputs.write_text(sweep_dir / ID_FILE, json.dumps({"jobs": jobs}, indent=1) + "\n")


@contextmanager
def claimed(sweep_dir: Path, jobs: Sequence[str], *, overwrite: bool = False) -> Iterator[None]:
    """Hold ``sweep_dir`` (an existing directory) for the sweep of ``jobs`` (each job's overrides)."""
    handle = _lock(sweep_dir)
    try:
        _claim(sweep_dir, list(jobs), overwrite)
        yield
    finally:
        handle.close()
