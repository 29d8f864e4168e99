"""A plain CSV format for runs measured with any tool, and its writer.

A run is a CSV file (or a folder holding ``requests.csv``) with one row per request and the header

    arrival_s,input_tokens,output_tokens,first_token_s,last_token_s[,scheduled_s][,request_id]

all times in seconds on one clock (any origin). Optional ``run.json`` beside it records what the run
was measured on: ``{"model": ..., "hardware": ..., "engine": {"max_num_seqs": ..., "total_kv_blocks":
..., ...}}`` with the names of ``cluster.engine``. The writer exports a simulation in this format, which
gives validation and calibration a run with a known answer.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distsim import inputs, outputs
from distsim.errors import InputFileError
from distsim.fidelity import settings
from distsim.fidelity.run import EngineSettings, MeasuredRun, request_table
from distsim.inputs import excerpt

REQUIRED = ("arrival_s", "input_tokens", "output_tokens", "first_token_s", "last_token_s")
SETTINGS_FILE = "run.json"


def csv_path(path: Path) -> Path | None:
    """The CSV file of a run given as a file or a folder, or None when ``path`` is not a CSV run."""
    if path.is_file() and path.suffix.lower() == ".csv":
        return path
    if path.is_dir() and (path / "requests.csv").is_file():
        return path / "requests.csv"
    return None


def _number(row: dict[str, str], key: str, path: Path, line: int) -> float:
    text = (row.get(key) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise InputFileError(path, f"{key} is not a number ({excerpt(text)})", line) from None
    if not math.isfinite(value):
        raise InputFileError(path, f"{key} is not finite ({excerpt(text)})", line)
    return value


def _count(row: dict[str, str], key: str, path: Path, line: int) -> int:
    value = _number(row, key, path, line)
    if value != int(value) or value < 1:
        raise InputFileError(path, f"{key} must be an integer >= 1 (got {excerpt(row[key])})", line)
    return int(value)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with inputs.csv_reader(path, dicts=True) as reader:
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
        if missing:
            raise InputFileError(path, f"missing column(s) {', '.join(missing)}", 1)
        rows = []
        for row in reader:
            line = reader.line_num
            if None in row or any(row.get(c) is None for c in REQUIRED):
                raise InputFileError(path, "wrong number of fields", line)
            rec = {c: _number(row, c, path, line) for c in ("arrival_s", "first_token_s", "last_token_s")}
            rec["input_tokens"] = _count(row, "input_tokens", path, line)
            rec["output_tokens"] = _count(row, "output_tokens", path, line)
            sched = (row.get("scheduled_s") or "").strip()
            rec["scheduled_s"] = _number(row, "scheduled_s", path, line) if sched else math.nan
            rec["source_id"] = row.get("request_id") or str(len(rows) + 1)
            if rec["last_token_s"] < rec["first_token_s"]:
                raise InputFileError(path, "last_token_s is before first_token_s", line)
            if rec["first_token_s"] < rec["arrival_s"]:
                raise InputFileError(path, "first_token_s is before arrival_s", line)
            rows.append(rec)
    if not rows:
        raise InputFileError(path, "no requests in the file")
    return rows


def _read_settings(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = inputs.read_json(path)
    engine = settings.section(data, "engine", path)
    unknown = set(engine) - set(EngineSettings.__dataclass_fields__)
    if unknown:
        known = ", ".join(EngineSettings.__dataclass_fields__)
        raise InputFileError(path, f"unknown engine setting {excerpt(sorted(unknown)[0])}; known: {known}")
    return {
        "model": settings.text(data, "model", path),
        "hardware": settings.text(data, "hardware", path),
        "engine": settings.engine_settings({k: (f"engine.{k}", v) for k, v in engine.items()}, path),
    }


def read_csv_run(path: str | Path) -> MeasuredRun:
    """A run in the plain CSV format (see the module docstring)."""
    path = Path(path)
    file = csv_path(path)
    if file is None:
        raise InputFileError(path, "not a CSV run (a .csv file, or a folder with requests.csv)")
    rows = _read_rows(file)
    t0 = min(r["arrival_s"] for r in rows)

    def ms(key: str) -> np.ndarray:
        return (np.array([r[key] for r in rows]) - t0) * 1000.0

    table = request_table(
        [r["source_id"] for r in rows],
        ms("arrival_s"),
        np.array([r["input_tokens"] for r in rows]),
        np.array([r["output_tokens"] for r in rows]),
        ms("scheduled_s"),
        ms("first_token_s"),
        ms("last_token_s"),
    )
    settings = _read_settings(file.parent / SETTINGS_FILE)
    return MeasuredRun(
        name=file.parent.name if file.name == "requests.csv" else file.stem,
        path=path,
        requests=table,
        model=settings.get("model"),
        hardware=settings.get("hardware"),
        engine=settings.get("engine", EngineSettings()),
        source_format="csv",
        source_file=file,
    )


def write_csv_run(
    folder: str | Path,
    requests: pd.DataFrame,
    *,
    model: str | None = None,
    hardware: str | None = None,
    engine: EngineSettings | None = None,
) -> Path:
    """Write a simulator request table (requests.parquet's columns) as a CSV run in ``folder``.

    Times are written to the microsecond, the simulator's resolution, so reading the run back gives
    the simulated requests exactly. Only completed requests are written (a measurement has no others).
    """
    folder = Path(folder)
    outputs.prepare_dir(folder)
    done = requests[requests["status"] == "completed"] if "status" in requests else requests

    def write_rows(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow([*REQUIRED, "scheduled_s", "request_id"])
            for r in done.itertuples(index=False):
                sched = r.arrival_ms + r.queue_ms
                writer.writerow(
                    [
                        f"{r.arrival_ms / 1000:.6f}",
                        r.input_tokens,
                        r.output_tokens,
                        f"{r.first_token_ms / 1000:.6f}",
                        f"{r.completion_ms / 1000:.6f}",
                        f"{sched / 1000:.6f}",
                        r.request_id,
                    ]
                )

    outputs.write_file(folder / "requests.csv", write_rows)
    settings = {"model": model, "hardware": hardware, "engine": {}}
    if engine is not None:
        settings["engine"] = {k: v for k, v in engine.__dict__.items() if v is not None}
    outputs.write_text(folder / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")
    return folder
