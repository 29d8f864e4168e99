"""The sweep directory on disk: job directories, atomic writes, and what resume trusts.

Every file the sweep later reads as good is written to a temporary name in the same directory and then
renamed (``os.replace`` is atomic on POSIX), so an interrupted sweep never leaves a half-written file under
a final name. A job's ``result.json`` is written last, after all its other outputs: its presence with
status ok (and the same overrides) is what makes resume skip the job.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

RESULT_FILE = "result.json"
RESULTS_FILE = "results.parquet"
RANKING_FILE = "ranking.csv"
SWEEP_FILE = "sweep.json"


def job_dir(sweep_dir: str | os.PathLike, index: int) -> Path:
    return Path(sweep_dir) / str(index)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` and then rename the temporary file onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write(path, write)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_result(job_path: str | os.PathLike, row: dict[str, Any]) -> None:
    """The job's row, written last: the marker of a complete job."""
    clean = {k: _json_safe(v) for k, v in row.items()}
    atomic_write_text(Path(job_path) / RESULT_FILE, json.dumps(clean, indent=1) + "\n")


def read_result(job_path: str | os.PathLike) -> dict[str, Any] | None:
    """The job's row if its result.json is complete and readable, else None."""
    try:
        row = json.loads((Path(job_path) / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None


def finished_row(sweep_dir: str | os.PathLike, index: int, overrides: str) -> dict[str, Any] | None:
    """A previous run's row for this job, if it succeeded with exactly these overrides."""
    row = read_result(job_dir(sweep_dir, index))
    if row is None or row.get("status") != "ok" or row.get("overrides") != overrides:
        return None
    return row


def write_table(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """results.parquet or ranking.csv, atomically (the format follows the suffix)."""
    suffix = Path(path).suffix
    if suffix == ".parquet":
        atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))
    elif suffix == ".csv":
        atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
    else:
        raise ValueError(f"unknown table format: {path}")
