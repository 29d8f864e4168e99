"""Reader for GuideLLM's benchmark report (``guidellm benchmark ... --output-path benchmarks.json``).

The report (guidellm/benchmark/benchmark.py, GuideLLM 0.2): ``{"benchmarks": [...]}``, one entry per
load the run swept, each with ``requests.successful``: per request ``prompt_tokens``, ``output_tokens``
and the client's wall-clock ``start_time``, ``first_token_time``, ``last_token_time``, ``end_time`` (s).
The benchmarks ran one after another against the same server, so the reader puts every successful
request of every benchmark on one clock (ms since the first send): the replay sees the session as the
server did, gaps between loads included. Errored and incomplete requests are left out.

Sampling: GuideLLM's OpenAI backend sends no temperature unless its ``extra_body`` says, so the server
applies the model's generation defaults (vLLM's ``--generation-config auto``): the run replays the
model's own sampling path, unless a benchmark's ``extras`` record a ``temperature`` (then that path).
The model is the worker's ``backend_model`` when recorded; the GPU and engine settings are not in the
report: pass ``cluster.hardware=NAME`` (and ``cluster.engine.*``) as overrides.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from distsim import inputs
from distsim.errors import InputFileError
from distsim.fidelity.run import MeasuredRun, request_table
from distsim.fidelity.vllm_bench_format import json_head, sampler_of
from distsim.inputs import excerpt

TIMES = ("start_time", "first_token_time", "last_token_time")


def is_guidellm_report(path: Path) -> bool:
    """A JSON file with a top-level ``benchmarks`` list whose entries hold ``requests``."""
    head = json_head(path, 200_000)
    return '"benchmarks"' in head and '"first_token_time"' in head


def _time(row: dict[str, Any], key: str, where: str, path: Path) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputFileError(path, f"{where}.{key} is not a finite time in seconds ({excerpt(value)})")
    return float(value)


def _model(bench: dict[str, Any]) -> str | None:
    worker = bench.get("worker") if isinstance(bench.get("worker"), dict) else {}
    model = worker.get("backend_model")
    return model if isinstance(model, str) and model else None


def _sampler(benches: list[dict[str, Any]]) -> str | None:
    for bench in benches:
        extras = bench.get("extras") if isinstance(bench.get("extras"), dict) else {}
        if "temperature" in extras or isinstance(extras.get("sampling_params"), dict):
            return sampler_of(extras)
    return None  # the model's generation defaults, as the server applied them


def read_guidellm_report(file: str | Path) -> MeasuredRun:
    """Every successful request of a GuideLLM report's benchmarks, on one clock."""
    path = Path(file)
    data = inputs.read_json(path)
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list) or not benches:
        raise InputFileError(path, "not a GuideLLM report (no 'benchmarks' list)")
    rows = []
    for b, bench in enumerate(benches):
        done = ((bench.get("requests") or {}).get("successful") if isinstance(bench, dict) else None) or []
        if not isinstance(done, list):
            raise InputFileError(path, f"benchmarks[{b}].requests.successful is not a list")
        for i, r in enumerate(done):
            where = f"benchmarks[{b}].requests.successful[{i}]"
            if not isinstance(r, dict):
                raise InputFileError(path, f"{where} is not an object")
            start, first, last = (_time(r, k, where, path) for k in TIMES)
            n_in, n_out = r.get("prompt_tokens"), r.get("output_tokens")
            if not isinstance(n_in, int) or not isinstance(n_out, int) or n_in < 1 or n_out < 1:
                raise InputFileError(path, f"{where}: prompt_tokens and output_tokens must be positive integers")
            rows.append((str(r.get("request_id") or f"{b}-{i}"), start, n_in, n_out, first, last))
    if not rows:
        raise InputFileError(path, "no successful request in any benchmark")
    t0 = min(r[1] for r in rows)
    ms = lambda k: np.array([(r[k] - t0) * 1000.0 for r in rows])  # noqa: E731
    table = request_table(
        [r[0] for r in rows], ms(1), np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
        np.full(len(rows), np.nan), ms(4), ms(5),
    )
    return MeasuredRun(
        name=path.stem, path=path, requests=table, model=_model(benches[0]), hardware=None,
        source_format="GuideLLM report", source_file=path, sampler=_sampler(benches),
    )
