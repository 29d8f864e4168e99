"""The calibration pipeline end to end on small fixtures: ``steps --fit`` on three step tables, ``runs``
with those GPU terms frozen on a short run, ``validate`` at the fitted values, ``report`` of the fit;
and on a folder of runs (two short H100 runs) when ../shared/data is present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distsim import load_config, simulate
from distsim.calibrate import main
from distsim.fidelity.csv_format import write_csv_run
from distsim.fidelity.run import EngineSettings
from distsim.request import Request

STEPS = Path(__file__).parent / "fixtures" / "fidelity_steps"
SUITE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_vllm_runs"
ENGINE = EngineSettings(max_num_seqs=8, max_num_batched_tokens=512, total_kv_blocks=2000, max_model_len=4096,
                        enable_prefix_caching=False, async_scheduling=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 40-request CSV run of the shipped model on an H100."""
    reqs = [Request(i, i * 60_000, 200 + 37 * i, 30 + i % 17) for i in range(40)]
    over = ["cluster.instances=1", "cluster.hardware=H100", "cluster.model=llama-3.1-8b",
            "cluster.latency.step_overhead_us=1200", *(f"{k}={v}" for k, v in ENGINE.overrides().items())]
    result = simulate(load_config(over), requests=reqs)
    return write_csv_run(tmp_path_factory.mktemp("run"), result.requests, model="llama-3.1-8b", hardware="H100", engine=ENGINE)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_steps_runs_validate_report(run, tmp_path, capsys):
    steps_out = tmp_path / "steps"
    assert main(["steps", str(STEPS), "--fit", "--out", str(steps_out)]) == 0
    step_fit = json.loads((steps_out / "step_fit.json").read_text())
    assert step_fit["command"].startswith("python -m distsim.calibrate steps") and "compute_efficiency" in step_fit["values"]

    from distsim.calibrate.runs import gpu_overrides

    from_file = gpu_overrides(steps_out / "step_fit.json")
    assert from_file == gpu_overrides(STEPS)  # --steps FOLDER fits the tables in place: the same GPU terms

    fit = tmp_path / "fit.json"
    code = main(["runs", str(run), "--steps", str(steps_out / "step_fit.json"), "--terms",
                 "cluster.latency.step_overhead_us", "--iterations", "2", "--workers", "1", "--out", str(fit)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(fit.read_text())
    gpu = f"cluster.latency.compute_efficiency={step_fit['values']['compute_efficiency']!r}"
    assert record["latency_kind"] == "roofline3" and gpu in record["overrides"]  # fitted under the step fit's GPU terms
    assert gpu in record["use"]  # and simulated with them
    assert record["fit"]["objective"] <= record["start"]["objective"]
    assert set(record["fit"]["runs"]) == {run.stem}

    val = tmp_path / "val"
    assert main(["validate", str(run), "--fit", str(fit), "--no-plots", "--out", str(val)]) == 0
    errors = json.loads((val / "validation.json").read_text())
    assert abs(errors["e2e_ms.mean"]["error_pct"]) < 5  # the fit's values, not the defaults

    page = tmp_path / "fit.md"
    assert main(["report", str(fit), "--steps", str(steps_out / "step_fit.json"), "--out", str(page)]) == 0
    text = page.read_text()
    assert "## Serving terms" in text and f"| {run.stem} |" in text and "## GPU terms (step fit)" in text


@pytest.mark.skipif(not SUITE.is_dir(), reason=f"{SUITE} is absent")
def test_runs_and_validate_on_a_folder_of_runs(tmp_path, capsys):
    fit = tmp_path / "fit.json"
    code = main(["runs", str(SUITE), "--runs", "66,67", "workload.num_requests=100", "--terms",
                 "cluster.latency.step_overhead_us", "--iterations", "1", "--workers", "1", "--out", str(fit)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(fit.read_text())
    assert set(record["fit"]["runs"]) == {"66", "67"} and record["latency_kind"] == "roofline3"
    assert main(["validate", str(SUITE), "--runs", "67", "workload.num_requests=100", "--out", str(tmp_path / "v")]) == 0
    assert (tmp_path / "v" / "suite.csv").is_file()
    page = tmp_path / "fit.md"
    assert main(["report", str(fit), "--residuals", "--out", str(page)]) == 0
    text = page.read_text()
    assert "## Where each run's error sits" in text and "| 66 |" in text and "| 67 |" in text


@pytest.mark.parametrize(
    "argv, words",
    [
        ([], "give a stage first"),
        (["fit"], "{steps,runs,residuals,validate,report} ... (got 'fit')"),
        (["runs", "RUN", "--terms", "cluster.latency.speed"], "--terms: not a fitted term: cluster.latency.speed"),
        (["runs", "RUN", "--lomo", "--workers", "1"], "--lomo needs runs of at least two models"),
        (["runs", "RUN", "--steps", "nowhere.json"], "--steps nowhere.json: not a step fit"),
        (["runs", "RUN", "RUN"], "two runs are named"),
        (["steps", str(STEPS), "--lomo"], "--lomo goes with --fit"),
        (["report", "nowhere.json"], "nowhere.json: cannot read a serving fit"),
        (["validate", "RUN", "--fit", "nowhere.json"], "--fit nowhere.json: not a fit written by calibrate runs"),
        (["report", "FIT", "--residuals"], "--residuals needs a fit on a folder of runs"),
        (["report", "CUT"], "not a serving fit (calibrate runs) (no 'start.values')"),  # before: a KeyError traceback
    ],
)
def test_a_users_mistake_is_one_line_and_exit_2(argv, words, run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fit = tmp_path / "fit.json"
    part = {"values": {}, "runs": {}, "medians": {}}
    fit.write_text(json.dumps({"command": "c", "start": part, "fit": part, "data": [str(run)]}))
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps({"command": "c", "start": {}, "fit": {"runs": {}}, "data": [str(run)]}))
    argv = [{"RUN": str(run), "FIT": str(fit), "CUT": str(cut)}.get(a, a) for a in argv]
    assert main(argv) == 2
    assert words in one_line_error(capsys)


def test_the_command_runs_as_a_module(tmp_path):
    """``python -m distsim.calibrate``: its help is the pipeline's map; no stage is one line, exit 2."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "distsim.calibrate", *a], capture_output=True, text=True, cwd=tmp_path)  # noqa: E731
    helped = run("-h")
    assert helped.returncode == 0 and "fit serving terms on runs" in helped.stdout
    bare = run()
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1 and "give a stage first" in bare.stderr


@pytest.mark.skipif(not SUITE.is_dir(), reason=f"{SUITE} is absent")
@pytest.mark.parametrize("stage", ["runs", "residuals", "validate"])
@pytest.mark.parametrize("ids", ["nosuchrun", "nosuchrun,67", " , "])
def test_every_stage_checks_runs_the_same_way(stage, ids, tmp_path, capsys):
    """Before: ``residuals --runs nosuchrun`` exit 0 with an empty table (``nosuchrun,67``: run 67 only)."""
    extra = {"runs": ["--workers", "1", "--out", str(tmp_path / "fit.json")], "residuals": [],
             "validate": ["--out", str(tmp_path / "v")]}[stage]  # fmt: skip
    assert main([stage, str(SUITE), "--runs", ids, "workload.num_requests=50", *extra]) == 2
    line = one_line_error(capsys)
    assert line.startswith("distsim.calibrate: --runs: ")
    assert (f"no run nosuchrun in {SUITE}" if "nosuchrun" in ids else "no run id given") in line
    assert not (tmp_path / "fit.json").exists() and not (tmp_path / "v" / "suite.csv").exists()
