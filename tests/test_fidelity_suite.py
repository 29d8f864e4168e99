"""The replay harness for a folder of measured runs : reader, metrics, replay, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from distsim.errors import InputFileError, UserError
from distsim.fidelity.metrics import stage_index, stage_metrics
from distsim.fidelity.suite import replay as suite_cli
from distsim.fidelity.suite.data import pool_trace, read_suite
from distsim.simulate import simulate

RUNS = Path(__file__).parents[1].parent / "shared" / "data" / "h100_vllm_runs"
needs_data = pytest.mark.skipif(not RUNS.is_dir(), reason=f"{RUNS} is absent")


@needs_data
def test_reader_on_the_h100_runs():
    suite = read_suite(RUNS)
    assert len(suite.runs) == 15
    runs = {r.id: r for r in suite.runs}
    r60 = runs["60"]
    assert (r60.model, r60.tp, r60.engine.max_num_batched_tokens, r60.engine.total_kv_blocks) == (
        "llama-3.1-70b", 4, 8192, 30251,
    )
    assert r60.cpu_kv_blocks == 6553 == r60.engine.cpu_kv_blocks and r60.flags() == []
    assert runs["17"].flags() == [] and Path(runs["17"].model).is_dir()
    assert [(s.duration_s, s.rate_rps) for s in r60.workload.stages] == [(600.0, 2.5), (600.0, 6.0)]
    assert r60.workload.system_prompt_len == 100 and r60.workload.num_system_prompts == 9
    assert runs["67"].trace == RUNS / "traces" / "reasoning-lite.csv"
    m = suite.measured_for(runs["67"])
    whole = m[(m.stage_index == -1) & (m.metric_name == "e2e_mean") & (m.simulator == "blis-evolved")]
    assert whole["actual"].tolist() == pytest.approx([17062.1273], abs=1e-3)
    assert suite.measured_for(runs["20260217-162547"]).empty
    # run 20260217-155451's records are repeated under three workload names: one row per key is kept
    m = suite.measured_for(runs["20260217-155451"])
    assert not m.duplicated(["stage_index", "metric_name", "simulator"]).any()
    assert len(m) == 81


def test_stage_split_and_metrics_by_hand():
    table = pd.DataFrame({
        "arrival_s": [1.0, 5.0, 10.0, 15.0, 25.0, 3.0],
        "completed": [True, True, True, True, True, False],
        "e2e_ms": [100.0, 200.0, 300.0, 500.0, 700.0, 9999.0],
        "ttft_ms": [10.0, 20.0, 30.0, 50.0, 70.0, 1.0],
        "output_tokens": [11, 21, 11, 31, 41, 5],
    })
    assert stage_index(table["arrival_s"].to_numpy(), [10, 10]).tolist() == [0, 0, 1, 1, 1, 0]
    got = stage_metrics(table, [10.0, 10.0]).set_index(["stage", "metric"])["value"]
    expected = {
        (0, "e2e_mean"): 150.0, (0, "e2e_p90"): 190.0, (0, "e2e_p99"): 199.0,
        (0, "ttft_mean"): 15.0, (0, "ttft_p90"): 19.0, (0, "ttft_p99"): 19.9, (0, "itl_mean"): 9.0,
        (1, "e2e_mean"): 500.0, (1, "e2e_p90"): 660.0, (1, "e2e_p99"): 696.0,
        (1, "ttft_mean"): 50.0, (1, "ttft_p90"): 66.0, (1, "ttft_p99"): 69.6, (1, "itl_mean"): 16.875,
        (-1, "e2e_mean"): 360.0, (-1, "e2e_p90"): 620.0, (-1, "e2e_p99"): 692.0,
        (-1, "ttft_mean"): 36.0, (-1, "itl_mean"): 324.0 / 22.0,
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
    assert list(got.index.get_level_values(0).unique()) == [-1, 0, 1]


@needs_data
def test_replay_of_one_run_end_to_end(tmp_path, capsys):
    rc = suite_cli.main([str(RUNS), "--out", str(tmp_path), "--runs", "67,20260217-162547",
                         "workload.num_requests=150"])
    assert rc == 0
    table = pd.read_csv(tmp_path / "suite.csv")
    assert set(table["run"].astype(str)) == {"67"}
    assert {"mpe_blis-evolved", "mpe_vidur", "error_pct"} <= set(table.columns)
    e2e = table[(table.stage == -1) & (table.metric == "e2e_mean")].iloc[0]
    assert e2e.error_pct == pytest.approx((e2e.simulated - e2e.measured) / e2e.measured * 100, abs=1e-3)
    md = (tmp_path / "suite.md").read_text()
    assert "| 67 |" in md and "20260217-162547: no records in measured.csv" in md
    assert "| distsim | 1 |" in capsys.readouterr().out
    # prefix groups give the system prompt shared block keys: later requests of a group hit the cache
    run = next(r for r in read_suite(RUNS).runs if r.id == "67")
    reqs = simulate(suite_cli.suite_config(run, ["workload.num_requests=60"])).requests
    assert (reqs["cached_tokens"] > 0).any()


@needs_data
def test_broken_experiments_csv_is_one_error(tmp_path, capsys):
    for name in ("workload_profiles.json", "measured.csv"):
        shutil.copy(RUNS / name, tmp_path / name)
    (tmp_path / "traces").symlink_to(RUNS / "traces")
    (tmp_path / "models").symlink_to(RUNS / "models")
    lines = (RUNS / "experiments.csv").read_text().splitlines()
    lines[2] = lines[2].replace(",2,128,", ",two,128,", 1)
    (tmp_path / "experiments.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFileError) as err:
        read_suite(tmp_path)
    assert err.value.path == str(tmp_path / "experiments.csv") and err.value.line == 3
    assert "'tp'" in err.value.message
    assert suite_cli.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_prompt_pool_override_is_the_suites_own():
    assert suite_cli.split_overrides(["a.b=1", "replay.prompts=pool", "c=2"]) == (["a.b=1", "c=2"], "pool")
    assert suite_cli.split_overrides(["a.b=1"]) == (["a.b=1"], "pool")  # inference-perf's prompt pool, the default
    for bad in ("replay.prompts=all", "replay.prompts"):
        with pytest.raises(UserError, match="replay.prompts must be trace or pool"):
            suite_cli.split_overrides([bad])


@needs_data
def test_prompt_pool_repeats_each_users_prompt():
    """inference-perf's generator cycles one prompt per user: from a user's second round on, the whole
    prompt (all but its last partial block) is in the prefix cache; with the trace's prompts only the
    system prompt's 6 blocks are."""
    run = next(r for r in read_suite(RUNS).runs if r.id == "63")
    pooled = pool_trace(run.trace)
    frame = pd.read_csv(pooled)
    assert frame["session"].nunique() == frame["user"].nunique() == 44
    assert (frame.groupby("user")["session"].nunique() == 1).all()
    assert pool_trace(run.trace) == pooled  # written once
    cached = {}
    for prompts in ("trace", "pool"):
        cfg = suite_cli.suite_config(run, ["workload.num_requests=300", f"replay.prompts={prompts}"])
        cached[prompts] = simulate(cfg).requests["cached_tokens"]
    assert cached["trace"].max() == 96  # 6 blocks of the 100-token system prompt
    assert (cached["pool"].iloc[200:] == 560).all()  # 566 tokens: 35 full blocks, the last token computed


@needs_data
@pytest.mark.parametrize("runs", ["nosuchrun", "67,nosuchrun"])
def test_an_unknown_run_id_is_one_line_naming_it_and_the_known_ids(runs, tmp_path, capsys):
    assert suite_cli.main([str(RUNS), "--out", str(tmp_path), "--runs", runs]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs: no run nosuchrun in" in err and "(runs: 17, 20, " in err
    assert not (tmp_path / "suite.csv").exists()


@needs_data
def test_a_runs_option_that_names_no_run_is_refused(tmp_path, capsys):
    assert suite_cli.main([str(RUNS), "--out", str(tmp_path), "--runs", " , "]) == 2
    assert capsys.readouterr().err.strip() == "distsim.calibrate: --runs: no run id given (got ' , ')"
