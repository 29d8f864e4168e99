"""Reader for the vLLM benchmark runs that LLMServingSim ships (bench/examples): a folder with
``requests.jsonl`` (one request per line), ``meta.json`` (engine settings, GPU), and optionally
``config.json`` (LLMServingSim's cluster description) and ``timeseries.csv`` (per-second engine stats).

Clocks: ``arrival_time`` is the client's wall clock; ``queued_ts``, ``scheduled_ts``,
``first_token_ts`` and ``last_token_ts`` are the engine's monotonic clock, with another origin. We align
the two on the first request (earliest arrival): its engine ``queued_ts`` is taken to be the instant of
its arrival. The first request meets an idle engine, so what this misses is its own front-end delay
(tokenisation, a few milliseconds; later requests' delays, 0-200 ms, stay inside their measured TTFT).

Sampling: LLMServingSim's bench client sends every request ``SamplingParams(temperature=0.0, ...)``
(bench/core/runner.py, ``_submit_all``), so vLLM samples greedily whatever the model's generation
defaults say; the run is replayed on the greedy path (``cluster.latency.serving.sampler=greedy``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distsim import inputs
from distsim.errors import InputFileError
from distsim.fidelity import settings
from distsim.fidelity.run import EngineSettings, MeasuredRun, request_table
from distsim.inputs import excerpt

GREEDY = "greedy"  # the client's temperature 0 (see the module docstring)
REQUIRED = ("input_toks", "output_toks", "arrival_time", "queued_ts", "first_token_ts", "last_token_ts")


def is_bench_run(path: Path) -> bool:
    return path.is_dir() and (path / "requests.jsonl").is_file()


def _int_field(row: dict, key: str, path: Path, line: int, minimum: int) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise InputFileError(path, f"{key} is not an integer ({excerpt(value)})", line)
    if value < minimum:
        raise InputFileError(path, f"{key} must be >= {minimum} (got {excerpt(value)})", line)
    return int(value)


def _time_field(row: dict, key: str, path: Path, line: int) -> float:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputFileError(path, f"{key} is not a finite number of seconds ({excerpt(value)})", line)
    return float(value)


def read_requests_jsonl(path: Path) -> list[dict[str, Any]]:
    """The lines of requests.jsonl, checked: every field present, typed and in order."""
    rows = []
    for line_no, row in inputs.json_lines(path):
        for key in REQUIRED:
            if key not in row:
                raise InputFileError(path, f"missing field {key!r}", line_no)
        rec = {
            "source_id": row.get("request_id", f"line-{line_no}"),
            "input_tokens": _int_field(row, "input_toks", path, line_no, 1),
            "output_tokens": _int_field(row, "output_toks", path, line_no, 1),
            "line": line_no,
        }
        for key in ("arrival_time", "queued_ts", "first_token_ts", "last_token_ts"):
            rec[key] = _time_field(row, key, path, line_no)
        sched = row.get("scheduled_ts")
        rec["scheduled_ts"] = math.nan if sched is None else _time_field(row, "scheduled_ts", path, line_no)
        if rec["last_token_ts"] < rec["first_token_ts"]:
            raise InputFileError(path, "last_token_ts is before first_token_ts", line_no)
        if rec["first_token_ts"] < rec["queued_ts"]:
            raise InputFileError(path, "first_token_ts is before queued_ts", line_no)
        rows.append(rec)
    if not rows:
        raise InputFileError(path, "no requests in the file")
    return rows


def align_clocks(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Milliseconds since the first arrival, for the wall-clock and the monotonic fields alike."""
    arrival = np.array([r["arrival_time"] for r in rows])
    first = int(np.argmin(arrival))  # the first request (ties: the earliest line)
    wall0 = arrival[first]
    mono0 = rows[first]["queued_ts"]

    def mono(key: str) -> np.ndarray:
        return (np.array([r[key] for r in rows]) - mono0) * 1000.0

    return {
        "arrival_ms": (arrival - wall0) * 1000.0,
        "scheduled_ms": mono("scheduled_ts"),
        "first_token_ms": mono("first_token_ts"),
        "completion_ms": mono("last_token_ts"),
    }


def _engine_settings(meta: dict[str, Any], path: Path) -> EngineSettings:
    kwargs = settings.section(meta, "engine_kwargs", path)
    kv = settings.section(meta, "kv_cache", path)
    resolved = settings.section(meta, "resolved_config", path)
    sched = settings.section(resolved, "scheduler_config", path, "resolved_config.")
    return settings.engine_settings(
        {
            "max_num_seqs": ("engine_kwargs.max_num_seqs", kwargs.get("max_num_seqs")),
            "max_num_batched_tokens": (
                "engine_kwargs.max_num_batched_tokens",
                kwargs.get("max_num_batched_tokens"),
            ),
            "max_model_len": ("engine_kwargs.max_model_len", kwargs.get("max_model_len")),
            "block_size": ("kv_cache.block_size", kv.get("block_size")),
            "total_kv_blocks": ("kv_cache.num_gpu_blocks", kv.get("num_gpu_blocks")),
            "gpu_memory_utilization": ("kv_cache.gpu_memory_utilization", kv.get("gpu_memory_utilization")),
            "enable_prefix_caching": ("kv_cache.enable_prefix_caching", kv.get("enable_prefix_caching")),
            "enable_chunked_prefill": (
                "resolved_config.scheduler_config.enable_chunked_prefill",
                sched.get("enable_chunked_prefill"),
            ),
            "scheduler_reserve_full_isl": (
                "resolved_config.scheduler_config.scheduler_reserve_full_isl",
                sched.get("scheduler_reserve_full_isl"),
            ),
            "async_scheduling": (
                "resolved_config.scheduler_config.async_scheduling",
                sched.get("async_scheduling"),
            ),
            "tensor_parallel_size": (
                "engine_kwargs.tensor_parallel_size",
                kwargs.get("tensor_parallel_size"),
            ),
            "data_parallel_size": ("engine_kwargs.data_parallel_size", kwargs.get("data_parallel_size")),
            "enable_expert_parallel": (
                "engine_kwargs.enable_expert_parallel",
                kwargs.get("enable_expert_parallel"),
            ),
        },
        path,
    )


def _first_instance(cluster: dict[str, Any]) -> dict[str, Any]:
    try:
        return cluster["nodes"][0]["instances"][0]
    except (KeyError, IndexError, TypeError):
        return {}


def read_timeseries(path: Path) -> pd.DataFrame:
    """timeseries.csv's running and waiting counts per tick (t in seconds since the first arrival)."""
    with inputs.csv_reader(path, dicts=True) as reader:
        missing = {"t", "running", "waiting"} - set(reader.fieldnames or ())
        if missing:
            raise InputFileError(path, f"missing column(s) {', '.join(sorted(missing))}", 1)
        rows = []
        for row in reader:
            try:
                rows.append((float(row["t"]), float(row["running"]), float(row["waiting"])))
            except (TypeError, ValueError):
                raise InputFileError(
                    path, "t, running and waiting must be numbers", reader.line_num
                ) from None
    return pd.DataFrame(rows, columns=["t_s", "running", "waiting"])


def read_bench_run(folder: str | Path) -> MeasuredRun:
    """A run folder in LLMServingSim's bench format, on the aligned clock."""
    folder = Path(folder)
    rows = read_requests_jsonl(folder / "requests.jsonl")
    times = align_clocks(rows)
    table = request_table(
        [r["source_id"] for r in rows],
        times["arrival_ms"],
        np.array([r["input_tokens"] for r in rows]),
        np.array([r["output_tokens"] for r in rows]),
        times["scheduled_ms"],
        times["first_token_ms"],
        times["completion_ms"],
    )
    meta_path, cluster_path = folder / "meta.json", folder / "config.json"
    meta = inputs.read_json(meta_path) if meta_path.is_file() else {}
    cluster = inputs.read_json(cluster_path) if cluster_path.is_file() else {}
    inst = _first_instance(cluster)
    engine = _engine_settings(meta, meta_path)
    if engine.tensor_parallel_size is None and isinstance(inst.get("tp_size"), int):
        engine = EngineSettings(**{**engine.__dict__, "tensor_parallel_size": inst["tp_size"]})
    device = settings.text(
        settings.section(meta, "hardware", meta_path), "device_name", meta_path, "hardware."
    )
    hardware = device or inst.get("hardware")
    kwarg_model = settings.text(
        settings.section(meta, "engine_kwargs", meta_path), "model", meta_path, "engine_kwargs."
    )
    model = settings.text(meta, "model", meta_path) or kwarg_model or inst.get("model_name")
    ts_path = folder / "timeseries.csv"
    return MeasuredRun(
        name=folder.name,
        path=folder,
        requests=table,
        model=model,
        hardware=hardware,
        engine=engine,
        timeseries=read_timeseries(ts_path) if ts_path.is_file() else None,
        source_format="vllm-bench (LLMServingSim)",
        source_file=folder / "requests.jsonl",
        **load_mode(meta, meta_path),
        sampler=GREEDY,
    )


def load_mode(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """How the client sent the requests, as ``vllm bench serve`` records it (``max_concurrency``: null or
    absent, open loop; ``request_rate``: a number, or "inf" / null for none): MeasuredRun's fields."""
    cap, rate = meta.get("max_concurrency"), meta.get("request_rate")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InputFileError(path, f"'max_concurrency' must be an integer >= 1 or null (got {excerpt(cap)})")
    if rate == "inf" or rate is None:
        rate = math.inf if rate == "inf" else None
    elif isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise InputFileError(path, f"'request_rate' must be a number > 0, \"inf\" or null (got {excerpt(rate)})")
    return {"max_concurrency": cap, "request_rate_rps": None if rate is None else float(rate)}
