"""The multi-run fit over a suite folder (issue 17): on a tiny folder whose measurements distsim made at
known coefficients, the fit finds them again; models weigh the same; workers do not change the answer;
bad specs are one line; leave-one-model-out gives one held-out row per run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distsim.calibrate import main as calibrate_main
from distsim.config.schema import FrontendConfig
from distsim.errors import UserError
from distsim.fidelity.multifit.fit import (
    RUN_CAP,
    RunError,
    SuiteEvaluator,
    fit_runs,
    fit_suite,
    run_term,
    suite_objective,
)
from distsim.fidelity.multifit.lomo import leave_one_model_out
from distsim.fidelity.multifit.pool import ReplayPool, replay_run
from distsim.fidelity.multifit.space import parse_params, start_values
from distsim.fidelity.suite.data import read_suite
from distsim.instance.latency.roofline3 import DEFAULTS

TRUTH = {"cluster.frontend.request_us": 20000.0, "cluster.latency.step_overhead_us": 800.0}
SPACE = ["cluster.frontend.request_us=0:50000,cluster.latency.step_overhead_us=0:3000"]
# the host time adds to every step (async scheduling would hide it behind the GPU step: not identifiable)
SYNC_HOST = ("cluster.latency.serving.host_overlap=false",)
QWEN, LLAMA = "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"
# id, served model, catalog name, workload, max_num_batched_tokens
RUNS = [
    ("q1", QWEN, "qwen2.5-7b", "chat", 2048),
    ("q2", QWEN, "qwen2.5-7b", "code", 1024),
    ("l1", LLAMA, "llama-3.1-8b", "chat", 2048),
]
PROFILES = {
    "chat": {
        "system_prompt_len": 100,
        "num_unique_system_prompts": 3,
        "num_users_per_system_prompt": 2,
        "question_len": 300,
        "output_len": 120,
        "stages": [(15, 4.0), (15, 6.0)],
    },
    "code": {
        "system_prompt_len": 200,
        "num_unique_system_prompts": 2,
        "num_users_per_system_prompt": 3,
        "question_len": 600,
        "output_len": 80,
        "stages": [(20, 3.0), (10, 7.0)],
    },
}


def _trace(spec: dict, seed: int) -> pd.DataFrame:
    """Poisson arrivals at each stage's rate, prompts of the group's system prompt plus a question."""
    rng = np.random.default_rng(seed)
    arrivals, t0 = [], 0.0
    for duration, rate in spec["stages"]:
        t = t0 + np.cumsum(rng.exponential(1.0 / rate, int(duration * rate * 1.5)))
        arrivals += list(t[t < t0 + duration])
        t0 += duration
    n = len(arrivals)
    groups = rng.integers(0, spec["num_unique_system_prompts"], n)
    return pd.DataFrame(
        {
            "arrival_s": np.round(arrivals, 6),
            "input_tokens": spec["system_prompt_len"]
            + rng.integers(spec["question_len"] // 2, spec["question_len"], n),
            "output_tokens": rng.integers(spec["output_len"] // 2, spec["output_len"] * 3 // 2, n),
            "prefix_group": groups,
            "user": groups * 1000 + rng.integers(0, 3, n),
            "round": np.zeros(n, dtype=int),
        }
    )


def _write_layout(root: Path) -> None:
    (root / "traces").mkdir(parents=True)
    profiles = {}
    for i, (name, spec) in enumerate(PROFILES.items()):
        _trace(spec, seed=i).to_csv(root / "traces" / f"{name}.csv", index=False)
        prefix = {k: v for k, v in spec.items() if k != "stages"}
        profiles[name] = {
            "shared_prefix": prefix,
            "stages": [{"duration": d, "rate": r} for d, r in spec["stages"]],
        }
    (root / "workload_profiles.json").write_text(json.dumps(profiles))
    rows = [
        "id,folder,model,model_config,precision,tp,max_num_seqs,max_num_batched_tokens,total_kv_blocks,"
        "cpu_kv_blocks,workload,num_requests"
    ]
    for rid, model, config, workload, mnbt in RUNS:
        rows.append(f"{rid},{rid}-folder,{model},{config},FP16,1,64,{mnbt},9000,0,{workload},0")
    (root / "experiments.csv").write_text("\n".join(rows) + "\n")


def _measured(root: Path, truth: dict[str, float]) -> None:
    """measured.csv: distsim's own replays at ``truth`` as the measurements, and a peer 10% slow."""
    suite = read_suite(root)
    rows = []
    for run in suite.runs:
        rep = replay_run(run, SYNC_HOST, tuple(truth.items()))
        assert rep.completed == rep.requests
        for stage, metric, value in rep.metrics.itertuples(index=False):
            rows.append((run.folder, stage, metric, "peer", value * 1.1, value, 10.0))
    pd.DataFrame(
        rows, columns=["folder", "stage_index", "metric_name", "simulator", "predicted", "actual", "mpe"]
    ).to_csv(root / "measured.csv", index=False)


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("suite")
    _write_layout(root)
    (root / "measured.csv").write_text("folder,stage_index,metric_name,simulator,predicted,actual,mpe\n")
    _measured(root, TRUTH)
    return root


def _fit(root: Path, budget: int, workers: int, space=SPACE):
    suite = read_suite(root)
    runs, _ = fit_runs(suite)
    params = parse_params(space)
    with ReplayPool(SYNC_HOST, workers) as pool:
        return fit_suite(SuiteEvaluator(suite, runs, pool), params, start_values(params), budget)


def test_the_fit_recovers_the_coefficients_that_made_the_measurements(tiny_suite):
    fit = _fit(tiny_suite, budget=40, workers=1)
    start = {"cluster.frontend.request_us": FrontendConfig.request_us, "cluster.latency.step_overhead_us": DEFAULTS.step_overhead_us}
    assert fit.start.values == start
    assert fit.start.objective > 0.1 and fit.best.objective < 0.02
    for key, truth in TRUTH.items():  # within 10%: 40 replays of CMA-ES from the defaults land 2-6% off
        assert fit.best.values[key] == pytest.approx(truth, rel=0.1), key
    assert len(fit.eval_seconds) == fit.evaluations == 40
    assert [r.run_id for r in fit.best.runs] == ["q1", "q2", "l1"]


def test_workers_do_not_change_the_answer(tiny_suite):
    one, two = _fit(tiny_suite, budget=5, workers=1), _fit(tiny_suite, budget=5, workers=2)
    assert one.best.values == two.best.values and one.best.objective == two.best.objective
    assert [(r.run_id, r.errors, r.term) for r in one.best.runs] == [
        (r.run_id, r.errors, r.term) for r in two.best.runs
    ]
    pd.testing.assert_frame_equal(one.best.result.table, two.best.result.table)


def test_each_model_weighs_the_same_and_a_run_is_capped():
    three = [RunError(f"a{i}", "A", {}, t) for i, t in enumerate((0.1, 0.2, 0.3))]
    assert suite_objective([*three, RunError("b", "B", {}, 1.0)]) == pytest.approx((0.2 + 1.0) / 2)
    assert suite_objective([RunError("b", "B", {}, 1.0), *three]) == pytest.approx(0.6)
    # weights 2 on the means, 1 on the tails; a blown-up run saturates; a missing figure is the cap
    assert run_term({"e2e_mean": 0.1, "e2e_p99": -0.4}) == pytest.approx((2 * 0.1 + 0.4) / 3)
    assert run_term({"e2e_mean": 50.0, "ttft_mean": 80.0}) == RUN_CAP
    assert run_term({"e2e_mean": 0.1, "ttft_mean": float("nan")}) == RUN_CAP


@pytest.mark.parametrize(
    "spec, words",
    [
        ("cluster.frontend.request_us=5:1", "LOW must be below HIGH"),
        ("cluster.frontend.request_us", "expected KEY=LOW:HIGH"),
        ("cluster.frontend.request_us=0:10:log", "log scale needs LOW > 0"),
        ("cluster.frontend.no_such_key=0:1", "not a numeric config key"),
        ("cluster.model=0:1", "not a numeric config key"),
    ],
)
def test_a_bad_params_spec_is_one_line(tiny_suite, tmp_path, capsys, spec, words):
    rc = calibrate_main(["--suite", str(tiny_suite), "--params", spec, "--out", str(tmp_path / "f.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and words in err and err.startswith("distsim.calibrate: --params")
    with pytest.raises(UserError):
        start_values(parse_params([spec]))


@pytest.mark.parametrize(("runs", "words"), [("q1,zz", "--runs: no run zz in "), (",", "--runs: no run id given")])
def test_a_runs_option_naming_no_known_run_is_one_line(tiny_suite, tmp_path, capsys, runs, words):
    rc = calibrate_main(["--suite", str(tiny_suite), "--runs", runs, "--out", str(tmp_path / "f.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and words in err and not (tmp_path / "f.json").exists()


def test_suite_options_need_suite(capsys):
    with pytest.raises(SystemExit) as exc:
        calibrate_main(["some-run", "--runs", "a"])
    assert exc.value.code == 2 and "--runs needs --suite" in capsys.readouterr().err


def test_leave_one_model_out_from_the_command_line(tiny_suite, tmp_path, capsys):
    out = tmp_path / "fit.json"
    rc = calibrate_main(
        [
            "--suite",
            str(tiny_suite),
            "--params",
            SPACE[0],
            "--budget",
            "3",
            "--workers",
            "1",
            "--leave-one-model-out",
            "--fold-budget",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert [r["id"] for r in record["runs"]] == ["q1", "q2", "l1"]
    assert set(record["fitted"]) == set(TRUTH) and record["budget"] == 3
    assert record["objective"]["fit"] <= record["objective"]["start"]
    assert set(record["errors_at_fit"]["q1"]["errors_pct"]) == {
        "e2e_mean",
        "e2e_p90",
        "e2e_p99",
        "ttft_mean",
        "ttft_p90",
        "ttft_p99",
        "itl_mean",
    }
    assert record["command"].startswith("python -m distsim.calibrate --suite") and record["distsim_version"]
    lomo = record["leave_one_model_out"]
    assert [f["held_out_model"] for f in lomo["folds"]] == [QWEN, LLAMA]
    assert [f["train_runs"] for f in lomo["folds"]] == [["l1"], ["q1", "q2"]]
    held = [run for f in lomo["folds"] for run in f["errors_held_out"]]
    assert sorted(held) == ["l1", "q1", "q2"]
    page = out.with_suffix(".md").read_text()
    assert "| distsim, held out | 3 |" in page and "| distsim, in sample | 3 |" in page
    assert "| peer | 3 | 10.0% |" in page  # the peer's recorded mpe on the same runs
    rows = page.split("### Held-out runs")[1].split("###")[0]
    assert sum(rows.count(f"| {r} |") for r in ("q1", "q2", "l1")) == 3


def test_lomo_needs_two_models(tiny_suite):
    suite = read_suite(tiny_suite)
    runs, _ = fit_runs(suite, ["q1", "q2"])
    params = parse_params(SPACE)
    with ReplayPool((), 1) as pool, pytest.raises(UserError, match="at least two models"):
        leave_one_model_out(suite, runs, pool, params, start_values(params), 2)
    with pytest.raises(UserError, match="no run zz"):
        fit_runs(suite, ["zz"])
