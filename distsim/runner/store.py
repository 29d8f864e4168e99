"""The sweep directory on disk: job directories and what resume trusts.

Every file is written through distsim.outputs (a temporary name in the same directory, then renamed), so
an interrupted sweep never leaves a half-written file under a final name. A job's ``result.json`` is
written last, after all its other outputs: its presence with status ok (and the same overrides) is what
makes resume skip the job.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from distsim import outputs

RESULT_FILE = "result.json"
RESULTS_FILE = "results.parquet"
RANKING_FILE = "ranking.csv"
SWEEP_FILE = "sweep.json"


def job_dir(sweep_dir: str | os.PathLike, index: int) -> Path:
    return Path(sweep_dir) / str(index)


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_result(job_path: str | os.PathLike, row: dict[str, Any]) -> None:
    """The job's row, written last: the marker of a complete job."""
    clean = {k: _json_safe(v) for k, v in row.items()}
    outputs.write_text(Path(job_path) / RESULT_FILE, json.dumps(clean, indent=1) + "\n")


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
