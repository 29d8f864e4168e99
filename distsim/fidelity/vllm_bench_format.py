"""Reader for ``vllm bench serve --save-result --save-detailed``: one JSON file with the run's figures
and, per request, its prompt and output lengths, time to first token, inter-token gaps and send time.

The per-request lists (vllm/benchmarks/serve.py, the result dict): ``input_lens``, ``output_lens``,
``ttfts`` (s), ``itls`` (one list of gaps per request, s), ``start_times`` (the client's
``time.perf_counter()`` when it sent the request, s), ``errors`` (empty for a request that completed);
``e2els`` (s) where the version records it. Clock: milliseconds since the first send. A failed request
(an error, no first token) is left out, as the benchmark leaves it out of its own figures.

Sampling: ``bench serve`` sends ``--temperature``, ``--top-p``, ``--top-k`` when given, and temperature 0
when no temperature is given ("Default to greedy decoding", vllm/benchmarks/serve.py), so a result
replays greedy unless it records another temperature (``sampling_params`` or ``temperature`` at the top
level: vLLM's ``--metadata`` puts user keys there). The GPU and the engine settings are not in the file:
pass ``cluster.hardware=NAME`` and the engine's ``cluster.engine.*`` values as overrides.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from distsim import inputs
from distsim.errors import InputFileError
from distsim.fidelity.run import MeasuredRun, request_table
from distsim.inputs import excerpt

LISTS = ("input_lens", "output_lens", "ttfts", "itls", "start_times")
GREEDY_TEMPERATURE = 1e-5  # vllm/v1/sample/sampler.py: below it a request samples greedily


def json_head(path: Path, chars: int) -> str:
    """The first ``chars`` characters of a ``.json`` file, read no further, to tell a report's format by
    its field names; "" for anything else or a file that cannot be read as text."""
    if not (path.is_file() and path.suffix == ".json"):
        return ""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(chars)
    except (OSError, UnicodeDecodeError):
        return ""


def is_vllm_bench_result(path: Path) -> bool:
    """A JSON file whose top level has the per-request lists of ``--save-detailed``."""
    head = json_head(path, 1_000_000)
    return '"ttfts"' in head and '"input_lens"' in head


def sampler_of(data: dict[str, Any]) -> str:
    """The sampling path the client's settings select (vLLM's Sampler): greedy below temperature 1e-5
    (bench serve's default), the sort path with top-p < 1 or top-k > 0, else temperature sampling."""
    params = data.get("sampling_params") if isinstance(data.get("sampling_params"), dict) else data
    temperature = params.get("temperature", 0.0)
    top_p, top_k = params.get("top_p", 1.0), params.get("top_k", 0)
    try:
        if float(temperature if temperature is not None else 0.0) < GREEDY_TEMPERATURE:
            return "greedy"
        if float(top_p if top_p is not None else 1.0) < 1.0 or int(top_k if top_k is not None else 0) > 0:
            return "top_k_top_p"
    except (TypeError, ValueError):
        return "greedy"
    return "temperature"


def _lists(data: dict[str, Any], path: Path) -> dict[str, list]:
    missing = [k for k in LISTS if not isinstance(data.get(k), list)]
    if missing:
        raise InputFileError(path, f"no per-request {missing[0]!r} list: save the result with --save-detailed "
                             "(vllm bench serve --save-result --save-detailed)")
    n = len(data["input_lens"])
    for k in LISTS:
        if len(data[k]) != n:
            raise InputFileError(path, f"{k} has {len(data[k])} entries, input_lens {n}")
    return {k: data[k] for k in (*LISTS, "errors", "e2els") if isinstance(data.get(k), list) and len(data[k]) == n}


def _number(value: Any, key: str, i: int, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputFileError(path, f"{key}[{i}] is not a finite number ({excerpt(value)})")
    return float(value)


def read_vllm_bench_result(file: str | Path) -> MeasuredRun:
    """A ``vllm bench serve --save-result --save-detailed`` JSON as a measured run."""
    path = Path(file)
    data = inputs.read_json(path)
    if not isinstance(data, dict):
        raise InputFileError(path, "not a vllm bench serve result (the top level is not an object)")
    cols = _lists(data, path)
    errors = cols.get("errors") or [""] * len(cols["input_lens"])
    rows = []
    for i in range(len(cols["input_lens"])):
        ttft = cols["ttfts"][i]
        if errors[i] or not ttft or int(cols["output_lens"][i] or 0) < 1:
            continue  # failed: no first token (the benchmark drops it from its figures too)
        start = _number(cols["start_times"][i], "start_times", i, path)
        first = start + _number(ttft, "ttfts", i, path)
        gaps = cols["itls"][i] or []
        if not isinstance(gaps, list):
            raise InputFileError(path, f"itls[{i}] is not a list of gaps ({excerpt(gaps)})")
        e2el = cols.get("e2els", [None] * (i + 1))[i]
        last = start + float(e2el) if isinstance(e2el, (int, float)) and e2el > 0 else first + sum(
            _number(g, f"itls[{i}]", j, path) for j, g in enumerate(gaps))
        n_in = _number(cols["input_lens"][i], "input_lens", i, path)
        n_out = _number(cols["output_lens"][i], "output_lens", i, path)
        rows.append((f"req-{i}", start, int(n_in), int(n_out), first, last))
    if not rows:
        raise InputFileError(path, "no request completed (every entry has an error or no first token)")
    t0 = min(r[1] for r in rows)
    ms = lambda k: np.array([(r[k] - t0) * 1000.0 for r in rows])  # noqa: E731
    table = request_table(
        [r[0] for r in rows], ms(1), np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
        np.full(len(rows), np.nan), ms(4), ms(5),
    )
    model = data.get("model_id") if isinstance(data.get("model_id"), str) else None
    return MeasuredRun(
        name=path.stem, path=path, requests=table, model=model, hardware=None,
        source_format="vllm bench serve --save-result", source_file=path, sampler=sampler_of(data),
    )
