"""Reader for AIPerf's per-request export (``aiperf profile``: ``artifacts/RUN/profile_export.jsonl``,
GenAI-Perf's successor), with the run's ``profile_export_aiperf.json`` beside it when present.

Each line (AIPerf's MetricRecordInfo, docs/tutorials/working-with-profile-exports.md): ``metadata``
with ``request_start_ns`` and ``request_end_ns`` (epoch ns), ``metrics`` with ``input_sequence_length``,
``output_sequence_length`` (tokens), ``time_to_first_token`` and ``request_latency`` (ms) as
``{"value", "unit"}``, and ``error`` (null for a request that completed). Clock: milliseconds since the
first send; a failed or cancelled request, or one of another phase than ``profiling``, is left out.

From ``profile_export_aiperf.json``: the model (``input_config.endpoint.model_names``), the GPU (its GPU
telemetry's ``gpu_name``, when the catalog knows it) and the sampling: AIPerf sends only what
``--extra-inputs`` adds, so a ``temperature`` there (``input_config.input.extra``) picks that path, and
without one the server applies the model's generation defaults.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from distsim import inputs
from distsim.errors import ConfigError, InputFileError
from distsim.fidelity.run import MeasuredRun, request_table
from distsim.fidelity.vllm_bench_format import sampler_of
from distsim.inputs import excerpt

RECORDS = "profile_export.jsonl"
SUMMARY = "profile_export_aiperf.json"


def records_path(path: Path) -> Path | None:
    """The per-request export: the file itself, or the run folder's ``profile_export.jsonl``."""
    if path.is_dir():
        return path / RECORDS if (path / RECORDS).is_file() else None
    return path if path.is_file() and path.name.endswith(".jsonl") and _looks_like_records(path) else None


def _looks_like_records(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.readline()
    except OSError:
        return False
    return '"metadata"' in head and '"metrics"' in head


def _metric(metrics: dict[str, Any], name: str, line: int, path: Path) -> float:
    item = metrics.get(name)
    value = item.get("value") if isinstance(item, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputFileError(path, f"metrics.{name}.value is not a finite number ({excerpt(item)})", line)
    return float(value)


def _summary(folder: Path) -> dict[str, Any]:
    path = folder / SUMMARY
    data = inputs.read_json(path) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


def _dig(data: Any, *keys: str) -> Any:
    for k in keys:
        data = data.get(k) if isinstance(data, dict) else None
    return data


def _gpu(summary: dict[str, Any]) -> str | None:
    from distsim.catalog import load_hardware

    endpoints = _dig(summary, "telemetry_data", "endpoints") or {}
    for endpoint in endpoints.values() if isinstance(endpoints, dict) else ():
        for gpu in (_dig(endpoint, "gpus") or {}).values():
            name = _dig(gpu, "gpu_name")
            if isinstance(name, str):
                try:
                    return load_hardware(name).name
                except ConfigError:
                    return None  # a GPU the catalog does not know: cluster.hardware=NAME
    return None


def read_aiperf_export(path: str | Path) -> MeasuredRun:
    """An AIPerf run (its folder or its ``profile_export.jsonl``) as a measured run."""
    file = records_path(Path(path))
    if file is None:
        raise InputFileError(Path(path), f"no AIPerf {RECORDS} here")
    rows = []
    for line, rec in inputs.json_lines(file):
        if not isinstance(rec, dict):
            raise InputFileError(file, "a record is not an object", line)
        meta, metrics = rec.get("metadata") or {}, rec.get("metrics") or {}
        if rec.get("error") or meta.get("was_cancelled") or meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        start_ns = meta.get("request_start_ns")
        if isinstance(start_ns, bool) or not isinstance(start_ns, int):
            raise InputFileError(file, f"metadata.request_start_ns is not an integer of ns ({excerpt(start_ns)})", line)
        ttft = _metric(metrics, "time_to_first_token", line, file)
        latency = _metric(metrics, "request_latency", line, file)
        n_in = int(_metric(metrics, "input_sequence_length", line, file))
        n_out = int(_metric(metrics, "output_sequence_length", line, file))
        rows.append((str(meta.get("x_request_id") or f"line-{line}"), start_ns, n_in, n_out, ttft, latency))
    if not rows:
        raise InputFileError(file, "no request completed in the profiling phase")
    t0 = min(r[1] for r in rows)
    arrival = np.array([(r[1] - t0) / 1e6 for r in rows])  # epoch ns to ms since the first, in integers first
    table = request_table(
        [r[0] for r in rows], arrival, np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
        np.full(len(rows), np.nan), arrival + np.array([r[4] for r in rows]), arrival + np.array([r[5] for r in rows]),
    )
    summary = _summary(file.parent)
    names = _dig(summary, "input_config", "endpoint", "model_names")
    extra = _dig(summary, "input_config", "input", "extra")
    return MeasuredRun(
        name=file.parent.name if file.name == RECORDS else file.stem, path=file, requests=table,
        model=names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None,
        hardware=_gpu(summary), source_format="AIPerf profile_export.jsonl", source_file=file,
        sampler=sampler_of(extra) if isinstance(extra, dict) and "temperature" in extra else None,
    )
