"""Run readers: clock alignment on hand-made runs, the CSV format, and bad files named with their line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from distsim.errors import InputFileError
from distsim.fidelity.readers import read_run

FIX = Path(__file__).parent / "fixtures" / "fidelity"

# (source id, arrival, first token, last token, TTFT, TPOT, E2E) in ms since the first arrival,
# worked out by hand in fixtures/fidelity/README.md; rows in arrival order.
EXPECTED = [
    ("bench-0", 0.0, 100.0, 500.0, 100.0, 100.0, 500.0),
    ("bench-2", 100.0, 200.0, 200.0, 100.0, math.nan, 100.0),
    ("bench-1", 250.0, 390.0, 890.0, 140.0, 100.0, 640.0),
]


def _check_times(run, ids):
    req = run.requests
    assert list(req["request_id"]) == [0, 1, 2]
    assert list(req["source_id"]) == ids
    for row, (_, arr, first, last, ttft, tpot, e2e) in zip(req.itertuples(), EXPECTED):
        assert row.arrival_ms == pytest.approx(arr, abs=1e-3)
        assert row.first_token_ms == pytest.approx(first, abs=1e-3)
        assert row.completion_ms == pytest.approx(last, abs=1e-3)
        assert row.ttft_ms == pytest.approx(ttft, abs=1e-3)
        assert row.e2e_ms == pytest.approx(e2e, abs=1e-3)
        if math.isnan(tpot):
            assert math.isnan(row.tpot_ms)
        else:
            assert row.tpot_ms == pytest.approx(tpot, abs=1e-3)


def test_bench_reader_aligns_the_monotonic_clock_on_the_first_request():
    run = read_run(FIX / "tiny_bench")
    _check_times(run, [e[0] for e in EXPECTED])
    assert run.requests["scheduled_ms"].tolist() == pytest.approx([0.0, 101.0, 290.0], abs=1e-3)
    assert run.model == "meta-llama/Llama-3.1-8B" and run.hardware == "H100"
    e = run.engine
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.total_kv_blocks, e.block_size) == (4, 512, 100, 16)
    assert e.enable_prefix_caching is False and e.tensor_parallel_size == 1
    assert run.timeseries is not None and list(run.timeseries.columns) == ["t_s", "running", "waiting"]
    reqs = run.to_requests()
    assert [(r.request_id, r.arrival_us, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        (0, 0, 100, 5),
        (1, 100_000, 40, 1),
        (2, 250_000, 300, 6),
    ]


def test_csv_reader_gives_the_same_times_and_reads_run_json():
    run = read_run(FIX / "tiny.csv")
    _check_times(run, ["a", "c", "b"])
    assert run.name == "tiny" and run.hardware == "H100" and run.engine.total_kv_blocks == 100


def _bench_copy(tmp_path: Path, lines: list[str] | None = None) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(FIX / "tiny_bench", folder)
    if lines is not None:
        (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _good_lines() -> list[dict]:
    return [json.loads(x) for x in (FIX / "tiny_bench" / "requests.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "bad, words",
    [
        ('{"request_id": "x", "input_toks": 5', "not valid JSON"),
        ("missing", "missing field 'last_token_ts'"),
        ("[1, 2]", "expected a JSON object"),
        ("tokens", "input_toks is not an integer"),
        ("backwards", "last_token_ts is before first_token_ts"),
    ],
)
def test_bad_bench_line_names_file_and_line(tmp_path, bad, words):
    rows = _good_lines()
    broken = dict(rows[1])
    if bad == "missing":
        del broken["last_token_ts"]
    elif bad == "tokens":
        broken["input_toks"] = "many"
    elif bad == "backwards":
        broken["last_token_ts"] = broken["first_token_ts"] - 1
    line = bad if bad.startswith(("{", "[")) else json.dumps(broken)
    folder = _bench_copy(tmp_path, [json.dumps(rows[0]), line, json.dumps(rows[2])])
    with pytest.raises(InputFileError) as err:
        read_run(folder)
    assert err.value.line == 2 and err.value.path == str(folder / "requests.jsonl")
    assert "requests.jsonl:2: " in str(err.value) and words in err.value.message


def test_broken_meta_json_names_the_file(tmp_path):
    folder = _bench_copy(tmp_path)
    (folder / "meta.json").write_text('{\n  "model": "x",\n  oops\n}\n')
    with pytest.raises(InputFileError) as err:
        read_run(folder)
    assert err.value.path.endswith("meta.json") and err.value.line == 3


def test_bad_csv_row_names_file_and_line(tmp_path):
    text = (FIX / "tiny.csv").read_text().replace("10.39", "soon")
    path = tmp_path / "run.csv"
    path.write_text(text)
    with pytest.raises(InputFileError) as err:
        read_run(path)
    assert err.value.line == 3 and "first_token_s is not a number" in err.value.message


def test_csv_missing_column_and_unknown_paths(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("arrival_s,input_tokens\n1,2\n")
    with pytest.raises(InputFileError, match="missing column"):
        read_run(path)
    with pytest.raises(InputFileError, match="no such file"):
        read_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match="not a run"):
        read_run(tmp_path / "empty")


def test_real_bench_run_carries_its_engine_settings():
    """The RTX 4090 run's meta.json records the scheduler's admission rule and the KV block count; the
    RTX PRO 6000 run's does not (its replay falls back on the config's values)."""
    bench = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "llmservingsim_bench"
    ada = read_run(bench / "RTX4090_Llama-3.1-8B")
    assert ada.engine.scheduler_reserve_full_isl is True and ada.engine.total_kv_blocks == 2588
    assert ada.engine.async_scheduling is True  # vLLM 0.19's default, recorded
    assert ada.engine.max_num_seqs == 256 and ada.engine.max_num_batched_tokens == 2048
    pro = read_run(bench / "RTXPRO6000_Llama-3.1-8B")
    assert pro.engine.scheduler_reserve_full_isl is None and pro.engine.total_kv_blocks is None
    assert pro.engine.async_scheduling is None  # not recorded: the config's default (true, as in vLLM 0.19)
    assert pro.engine.max_num_seqs == 128


def test_bench_run_replays_greedy_as_its_client_sent_it():
    """LLMServingSim's bench client sends temperature 0: its runs replay on the greedy sampling path,
    whatever the model's generation defaults say, unless the user's override picks another."""
    from distsim.fidelity.replay import replay_config

    run = read_run(FIX / "tiny_bench")
    assert run.sampler == "greedy"
    cfg = replay_config(run, ["cluster.hardware=H100", "cluster.model=meta-llama/Llama-3.1-8B"])
    assert cfg.cluster.latency.serving.sampler == "greedy"
    mine = replay_config(run, ["cluster.hardware=H100", "cluster.model=meta-llama/Llama-3.1-8B",
                               "cluster.latency.serving.sampler=top_k_top_p"])
    assert mine.cluster.latency.serving.sampler == "top_k_top_p"
    csv_run = read_run(FIX / "tiny.csv")
    assert csv_run.sampler is None  # the CSV format does not say: the model's own defaults


def test_vllm_bench_serve_result_reads_per_request_times_and_its_sampling(tmp_path):
    """``vllm bench serve --save-result --save-detailed``: sends on the client's clock, TTFT and E2E
    from ttfts and the gaps, the failed request left out, greedy (bench serve's default temperature 0),
    another temperature where the result records one."""
    run = read_run(FIX / "vllm_bench_serve.json")
    req = run.requests
    assert list(req["source_id"]) == ["req-0", "req-1", "req-3"] and run.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert req["arrival_ms"].tolist() == pytest.approx([0.0, 250.0, 500.0], abs=1e-6)
    assert req["ttft_ms"].tolist() == pytest.approx([100.0, 150.0, 200.0], abs=1e-6)
    assert req["e2e_ms"].tolist() == pytest.approx([300.0, 250.0, 400.0], abs=1e-6)
    assert req["tpot_ms"].tolist() == pytest.approx([200.0 / 3, 100.0, 100.0], abs=1e-6)
    assert run.sampler == "greedy" and run.hardware is None
    data = json.loads((FIX / "vllm_bench_serve.json").read_text())
    for extra, path in (({"temperature": 0.7}, "temperature"), ({"sampling_params": {"temperature": 0.6, "top_p": 0.9}}, "top_k_top_p")):
        f = tmp_path / f"{path}.json"
        f.write_text(json.dumps({**data, **extra}))
        assert read_run(f).sampler == path


def test_vllm_bench_serve_result_without_details_names_the_flag(tmp_path):
    data = json.loads((FIX / "vllm_bench_serve.json").read_text())
    f = tmp_path / "summary_only.json"
    f.write_text(json.dumps({k: v for k, v in data.items() if k not in ("start_times",)}))
    with pytest.raises(InputFileError, match="--save-detailed"):
        read_run(f)


def test_guidellm_report_puts_every_benchmark_on_one_clock(tmp_path):
    """GuideLLM's report: successful requests of every benchmark (loads run one after another) on the
    client's clock, the errored one left out, the worker's model; no temperature recorded: the model's
    own sampling defaults (None), a recorded one picks its path."""
    run = read_run(FIX / "guidellm_benchmarks.json")
    req = run.requests
    assert list(req["source_id"]) == ["a", "b", "c"] and run.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert req["arrival_ms"].tolist() == pytest.approx([0.0, 500.0, 2000.0], abs=1e-6)
    assert req["ttft_ms"].tolist() == pytest.approx([80.0, 100.0, 50.0], abs=1e-6)
    assert req["e2e_ms"].tolist() == pytest.approx([380.0, 300.0, 250.0], abs=1e-6)
    assert req["tpot_ms"].tolist() == pytest.approx([100.0, 100.0, 50.0], abs=1e-6)
    assert run.sampler is None
    data = json.loads((FIX / "guidellm_benchmarks.json").read_text())
    data["benchmarks"][0]["extras"] = {"temperature": 0.0}
    f = tmp_path / "greedy.json"
    f.write_text(json.dumps(data))
    assert read_run(f).sampler == "greedy"
    data["benchmarks"][0]["requests"]["successful"][0]["first_token_time"] = "soon"
    f.write_text(json.dumps(data))
    with pytest.raises(InputFileError, match=r"successful\[0\].first_token_time is not a finite time"):
        read_run(f)


def test_aiperf_run_reads_its_records_and_its_summary(tmp_path):
    """AIPerf: per-request records on the client's clock, the failed one left out; the model, the GPU
    (telemetry's name, a catalog alias) and the sampling (--extra-inputs temperature) from the summary;
    without the summary, no GPU and the model's own sampling defaults."""
    run = read_run(FIX / "aiperf_run")
    req = run.requests
    assert list(req["source_id"]) == ["req-0", "req-1", "req-3"]
    assert req["arrival_ms"].tolist() == pytest.approx([0.0, 250.0, 600.0], abs=1e-6)
    assert req["ttft_ms"].tolist() == pytest.approx([120.0, 80.0, 60.0], abs=1e-6)
    assert req["e2e_ms"].tolist() == pytest.approx([420.0, 180.0, 260.0], abs=1e-6)
    assert req["tpot_ms"].tolist() == pytest.approx([100.0, 50.0, 50.0], abs=1e-6)
    assert run.model == "meta-llama/Llama-3.1-8B-Instruct" and run.hardware == "RTX4090" and run.sampler == "temperature"
    alone = tmp_path / "export.jsonl"
    shutil.copy(FIX / "aiperf_run" / "profile_export.jsonl", alone)
    bare = read_run(alone)
    assert bare.hardware is None and bare.sampler is None and len(bare.requests) == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text((FIX / "aiperf_run" / "profile_export.jsonl").read_text().replace('"value": 80,', '"value": "fast",'))
    with pytest.raises(InputFileError, match=r"line 2.*time_to_first_token.value is not a finite number|time_to_first_token.value is not a finite number"):
        read_run(bad)
