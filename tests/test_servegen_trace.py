"""ServeGen's released data as a trace (workload.format=servegen): each window's requests drawn as
ServeGen's generator draws them, lengths from the window's distributions, one trace per seed, and broken
files named with their line."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import InputFileError
from distsim.workload import build_workload
from distsim.workload.traces.servegen import ServeGenReader, _window_rows, read_dataset

DATA = Path("/work/shared/data/servegen_sample")
REASON = DATA / "reason_deepseek-r1_chunk-1-trace.csv"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="the shared data folder is not mounted")


def rows(path: Path, seed: int = 0) -> list:
    reader = ServeGenReader(path)
    reader.seed = seed
    return list(reader.rows())


def test_each_window_gets_its_rate_and_its_lengths():
    got = rows(REASON)
    windows = list(_window_rows(REASON))
    data = read_dataset(REASON.with_name("reason_deepseek-r1_chunk-1-dataset.json"))
    by_line: dict[int, list] = {}
    for r in got:
        by_line.setdefault(r.line, []).append(r)
    busy = [w for w in windows if w[3] and w[2] > 0]
    assert len(busy) > 20
    for ln, start, rate, *_ in busy:
        n = math.ceil(rate * 600)
        mine = by_line.get(ln, [])
        assert n - 1 <= len(mine) <= n  # ceil(rate x window) draws, the last at the window's end may fall out
        assert all(start * 1e9 <= r.time_ns < (start + 600) * 1e9 for r in mine)
    times = [r.time_ns for r in got]
    assert times == sorted(times)
    ins = np.array([r.input_tokens for r in got])
    tokens, cum = data[0][1]
    mean = float((tokens * np.diff(np.r_[0.0, cum])).sum())
    first = np.array([r.input_tokens for r in got if r.time_ns < data[1][0] * 1e9])
    assert first.mean() == pytest.approx(mean, rel=0.1)  # the first dataset window's input distribution
    assert ins.min() >= 1


def test_a_seed_gives_one_trace():
    a, b, c = rows(REASON, 0), rows(REASON, 0), rows(REASON, 1)
    assert [(r.time_ns, r.input_tokens) for r in a] == [(r.time_ns, r.input_tokens) for r in b]
    assert [r.time_ns for r in a] != [r.time_ns for r in c]


def test_it_replays_as_a_trace_and_closed_loop():
    cfg = ["workload.kind=trace", "workload.format=servegen", f"workload.path={REASON}", "workload.num_requests=200",
           "cluster.instances=1"]
    r = simulate(load_config(cfg))
    assert r.summary["workload"]["format"] == "servegen" and r.summary["requests"]["completed"] == 200
    src = build_workload({"kind": "trace", "format": "servegen", "path": str(REASON), "num_requests": 50}, seed=0)
    assert len(list(src)) == 50
    closed = simulate(load_config([*cfg, "workload.clients.count=4"])).requests.sort_values("request_id")
    assert closed["input_tokens"].tolist() == r.requests.sort_values("request_id")["input_tokens"].tolist()


@pytest.mark.parametrize(
    ("trace_line", "dataset", "message"),
    [
        ("0,0.1,0.9,Poisson,1.0,2.0", None, r"trace.csv:1: unknown arrival pattern 'Poisson'"),
        ("0,0.1,0.9,Gamma,1.0", None, r"trace.csv:1: expected 6 fields"),
        ("0,-1,0.9,Gamma,1.0,2.0", None, r"trace.csv:1: rate must be >= 0"),
        ("0,0.1,0.9,Gamma,1.0,2.0", '{"0": {"input_tokens": "{5: 0.5}", "output_tokens": "{1: 1.0}"}}',
         r"dataset.json: window 0 input_tokens: probabilities must be >= 0 and sum to 1"),
    ],
)
def test_broken_files_name_the_file_and_line(tmp_path, trace_line, dataset, message):
    trace = tmp_path / "chunk-1-trace.csv"
    trace.write_text(trace_line + "\n600,0.1,0.9,Gamma,1.0,2.0\n")
    if dataset is None:
        shutil.copy(REASON.with_name("reason_deepseek-r1_chunk-1-dataset.json"), tmp_path / "chunk-1-dataset.json")
    else:
        (tmp_path / "chunk-1-dataset.json").write_text(dataset)
    with pytest.raises(InputFileError, match=message):
        rows(trace)
