"""Sweeps on a real (local) Ray: determinism across runners, faults, retries, resume, and the report.

One Ray session serves the whole module (the runner reuses a Ray the process already started), and the
simulations are small, so the module takes a few seconds beyond Ray's own start-up.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from raykit import local_ray

from distsim import load_config, simulate
from distsim.errors import UserError
from distsim.runner import store
from distsim.runner import sweep as sweep_module
from distsim.runner.api import sweep
from distsim.runner.pool import ActorPool
from distsim.runner.table import report_text
from distsim.simulate import summary_json

SMALL = ["workload.num_requests=200", "cluster.instances=2"]
GRID = ["policy=round_robin,random", "workload.arrival.rate_rps=10,40", "seed=0,1"]


@pytest.fixture(scope="module")
def ray_session():
    with local_ray():  # another module's session is shared and left running
        yield


@pytest.fixture(scope="module")
def grid(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("grid")
    outcome = sweep([*SMALL, *GRID], out, num_workers=2, progress=False, echo=False)
    return out, outcome


def figures(results: pd.DataFrame) -> pd.DataFrame:
    """The simulated figures keyed by (set of config overrides, seed): what must not depend on the runner."""
    keep = [
        c
        for c in results.columns
        if not c.startswith(("run.", "param.")) and c not in ("job", "overrides", "config")
    ]
    frame = results[keep].copy()
    frame.index = [(" ".join(sorted(c.split())), int(s)) for c, s in zip(results["config"], results["seed"])]
    return frame.sort_index()


def test_every_job_equals_the_same_overrides_run_alone_in_process(grid, tmp_path):
    out, outcome = grid
    assert outcome.ok == 8 and outcome.failed == 0 and outcome.exit_code == 0
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 8 and set(results["policy"]) == {"round_robin", "random"}
    for _, row in results.iterrows():
        overrides = row["overrides"].split()
        result = simulate(load_config(overrides))
        job = out / str(row["job"])
        assert (job / "summary.json").read_text() == summary_json(result.summary), overrides
        result.write(tmp_path / str(row["job"]))
        assert (job / "requests.parquet").read_bytes() == (
            tmp_path / str(row["job"]) / "requests.parquet"
        ).read_bytes()
        assert row["fitness"] == result.summary["fitness"]
        assert (job / ".hydra" / "config.yaml").exists() and (job / ".hydra" / "overrides.yaml").exists()


def test_results_do_not_depend_on_the_number_of_workers_or_the_job_order(grid, tmp_path):
    out, outcome = grid
    reordered = sweep([*reversed(GRID), *SMALL], tmp_path, num_workers=1, progress=False, echo=False)
    assert reordered.workers == 1 and outcome.workers == 2
    assert reordered.results["overrides"].tolist() != outcome.results["overrides"].tolist()  # other job order
    pd.testing.assert_frame_equal(figures(outcome.results), figures(reordered.results), check_like=True)
    rank_a = outcome.ranking.assign(
        config=outcome.ranking["config"].map(lambda c: " ".join(sorted(c.split())))
    )
    rank_b = reordered.ranking.assign(
        config=reordered.ranking["config"].map(lambda c: " ".join(sorted(c.split())))
    )
    cols = ["fitness_mean", "fitness_ci_low", "fitness_ci_high", "rank", "tied_with_best"]
    pd.testing.assert_frame_equal(
        rank_a.set_index("config")[cols].sort_index(), rank_b.set_index("config")[cols].sort_index()
    )


def test_a_killed_worker_is_replaced_and_failing_jobs_are_reported(ray_session, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv("DISTSIM_FAULT_RAISE", "1")
    monkeypatch.setenv("DISTSIM_FAULT_EXIT", f"2:{marker}")
    out = tmp_path / "sweep"
    outcome = sweep(["workload.num_requests=200", "cluster.instances=2", "seed=0,1,2"], out, num_workers=2,
                    progress=False, echo=False)
    res = outcome.results.set_index("job")
    assert marker.exists() and outcome.replaced_workers == 1  # the worker running job 2 died once
    assert res.loc[2, "status"] == "ok" and res.loc[2, "run.attempts"] == 2
    assert (
        res.loc[1, "status"] == "failed"
        and "injected fault" in res.loc[1, "error"]
        and res.loc[1, "error_kind"] == "exception"
        and res.loc[1, "run.attempts"] == 1
    )
    assert (out / "1" / "error.txt").exists()
    assert res.loc[0, "status"] == "ok"
    assert (outcome.ok, outcome.failed, outcome.exit_code) == (2, 1, 0)
    assert "retried after their worker died or hung: job 2 (2 attempts)" in report_text(outcome)
    assert json.loads((out / "sweep.json").read_text())["retried"] == {"2": 2}
    ranking = pd.read_csv(out / "ranking.csv").set_index("config")
    assert ranking.loc["workload.num_requests=200 cluster.instances=2", "n"] == 2


def test_a_bad_value_in_any_configuration_stops_the_sweep_before_its_first_job(tmp_path):
    out = tmp_path / "sweep"
    with pytest.raises(UserError, match=r"cluster.instances: must be >= 1.*configuration: .*cluster.instances=0"):
        sweep(["workload.num_requests=200", "cluster.instances=2,0", "seed=0,1"], out, num_workers=1,
              progress=False, echo=False)
    assert not list(out.glob("*/result.json")) and not (out / "results.parquet").exists()


def test_regret_in_a_sweep_is_refused_not_ignored(tmp_path):
    out = tmp_path / "sweep"
    with pytest.raises(UserError, match=r"regret.samples: .*without -m.*configuration: "):
        sweep(["workload.num_requests=200", "regret.samples=2", "seed=0,1"], out, num_workers=1,
              progress=False, echo=False)
    assert not list(out.glob("*/result.json"))


def test_a_job_whose_worker_keeps_dying_fails_after_the_retries(ray_session, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTSIM_FAULT_EXIT", f"0:{tmp_path / 'killed'}")
    outcome = sweep([*SMALL, "seed=0"], tmp_path / "sweep", max_retries=0, progress=False, echo=False)
    row = outcome.results.iloc[0]
    assert row["status"] == "failed" and row["error_kind"] == "worker_died" and outcome.exit_code == 1


def test_a_job_that_hangs_on_a_live_worker_is_resubmitted_with_the_same_outputs(grid, tmp_path, monkeypatch, capsys):
    out, outcome = grid
    marker = tmp_path / "hung"
    monkeypatch.setenv("DISTSIM_FAULT_HANG", f"3:{marker}")  # job 3's first attempt sleeps for ever
    # 10 s: far above a job's 0.1 s, so that on a starved machine no other job is taken for hung
    again = sweep([*SMALL, *GRID], tmp_path / "sweep", num_workers=2, job_timeout_s=10, progress=False, echo=False)
    assert marker.exists() and again.replaced_workers >= 1 and again.ok == 8
    res = again.results.set_index("job")
    assert res.loc[3, "run.attempts"] == 2
    pd.testing.assert_frame_equal(figures(outcome.results), figures(again.results))
    assert again.results["job"].tolist() == list(range(8))  # ordered by job, not by completion
    for job in range(8):
        for name in ("summary.json", "requests.parquet", "instances.parquet"):
            assert (tmp_path / "sweep" / str(job) / name).read_bytes() == (out / str(job) / name).read_bytes()
    err = capsys.readouterr().err
    assert f"job 3 [{res.loc[3, 'overrides']}]: no result within 10 s (runner.job_timeout_s); its worker was replaced, try 2 of 3" in err
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["retried"]["3"] == 2


def test_a_job_that_hangs_on_every_try_fails_with_one_line_naming_it(ray_session, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISTSIM_FAULT_HANG", "0:")  # every attempt of job 0 hangs
    outcome = sweep([*SMALL, "seed=0"], tmp_path, job_timeout_s=0.5, max_retries=1, progress=False, echo=False)
    row = outcome.results.iloc[0]
    assert row["status"] == "failed" and row["error_kind"] == "timeout" and row["run.attempts"] == 2
    # the work, not the clock: two attempts, each cut at the bound and its worker replaced (a hang that was
    # never cut would leave this test waiting, never pass it)
    assert outcome.exit_code == 1 and outcome.replaced_workers == 2
    line = (
        "job 0 [workload.num_requests=200 cluster.instances=2 seed=0] failed: "
        "no result within 0.5 s (runner.job_timeout_s), on each of 2 tries"
    )
    assert line in capsys.readouterr().err.splitlines()


def test_a_job_whose_worker_never_starts_fails_with_one_line_naming_it(ray_session, tmp_path, monkeypatch, capsys):
    class Unplaceable(ActorPool):  # actors that ask for a resource no node has: Ray never starts them
        def __post_init__(self) -> None:
            self.actor_options = {**self.actor_options, "resources": {"distsim_test_nowhere": 1.0}}
            self.start_s = 1.0
            super().__post_init__()

    monkeypatch.setattr(sweep_module, "ActorPool", Unplaceable)
    outcome = sweep([*SMALL, "seed=0"], tmp_path, max_retries=1, progress=False, echo=False)
    row = outcome.results.iloc[0]
    assert row["status"] == "failed" and row["error_kind"] == "timeout" and row["run.attempts"] == 2
    assert outcome.exit_code == 1  # two attempts (run.attempts above), each given up at start_s: counted, not timed
    line = (
        "job 0 [workload.num_requests=200 cluster.instances=2 seed=0] failed: "
        "its worker did not start within 1 s, on each of 2 tries"
    )
    assert line in capsys.readouterr().err.splitlines()


def test_a_sweep_of_one_job(ray_session, tmp_path):
    outcome = sweep(SMALL, tmp_path, progress=False, echo=False)
    assert (outcome.total, outcome.ok, outcome.workers) == (1, 1, 1)
    row = outcome.ranking.iloc[0]
    assert row["n"] == 1 and row["rank"] == 1 and row["tied_with_best"] and pd.isna(row["fitness_ci_low"])
    assert (tmp_path / "results.parquet").exists() and (tmp_path / "ranking.csv").exists()


def test_resume_skips_finished_jobs_and_reruns_missing_or_broken_ones(grid, tmp_path):
    out, outcome = grid
    stamps = {i: (out / str(i) / "result.json").stat().st_mtime_ns for i in range(8)}
    again = sweep([*SMALL, *GRID], out, num_workers=2, progress=False, echo=False)
    assert again.resumed == 8 and again.workers == 0  # nothing ran: Ray not even needed
    assert all((out / str(i) / "result.json").stat().st_mtime_ns == stamps[i] for i in range(8))
    (out / "3" / "result.json").unlink()  # interrupted before its marker was written
    (out / "5" / "result.json").write_text('{"status": "ok", "overr')  # torn file: never read as good
    partial = sweep([*SMALL, *GRID], out, num_workers=2, progress=False, echo=False)
    assert partial.resumed == 6 and partial.ok == 8
    assert (out / "2" / "result.json").stat().st_mtime_ns == stamps[2]
    assert (out / "3" / "result.json").stat().st_mtime_ns != stamps[3]
    pd.testing.assert_frame_equal(figures(outcome.results), figures(partial.results))
    assert store.finished_row(out, 0, "policy=other seed=0") is None  # another sweep in the same dir: rerun
    assert json.loads((out / "sweep.json").read_text())["resumed"] == 6


def test_the_report_draws_fitness_cdfs_and_the_swept_parameter(grid):
    from distsim.report import main as report_main

    out, _ = grid
    assert report_main([str(out)]) == 0
    names = {p.name for p in out.glob("report/*.png")}
    assert {"fitness.png", "latency_cdf.png"} <= names
    assert any("workload.arrival.rate_rps" in n for n in names)
    text = (out / "report" / "report.md").read_text()
    assert "round_robin" in text and "fitness.png" in text and "95%" in text


@pytest.mark.parametrize("niceness", [0, 3])
def test_workers_run_at_the_drivers_priority_unless_told_otherwise(ray_session, tmp_path, niceness):
    """Ray's own default starts its workers 15 nice levels down: on a shared machine the jobs starved."""
    import os

    outcome = sweep([*SMALL, "seed=0,1"], tmp_path, num_workers=2, worker_niceness=niceness, progress=False, echo=False)
    assert outcome.ok == 2
    assert outcome.results["run.niceness"].tolist() == [min(os.nice(0) + niceness, 19)] * 2
