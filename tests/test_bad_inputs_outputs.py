"""Outputs and environment faults: a bad output path, a full disk, a second sweep into one directory,
Ctrl-C, an unreachable cluster, broken sweep files, bad --budget and a search with no valid candidate.

Each command fails with one line naming the path or key, the status it documents and no traceback, and
never leaves a file that looks complete but is not. We run as root, so a read-only directory cannot be
made with chmod: the fault is injected where distsim meets the OS (os.access for the directory check,
distsim.outputs.write_file for a write that runs out of space), in the command's own process.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from clikit import ROOT, SAYS_IF_RAY_IMPORTED, assert_user_error, patched, run_module
from raykit import local_ray

from distsim import load_config, outputs, simulate
from distsim.errors import ConfigError, OutputError, UserError
from distsim.runner import claim
from distsim.runner.api import sweep

SMALL = ["workload.num_requests=100", "cluster.instances=2"]
RUNNER = ["runner.num_workers=1", "runner.progress=false"]
FIDELITY_RUN = str(ROOT / "tests" / "fixtures" / "fidelity" / "tiny.csv")


def read_only(prefix: Path) -> str:
    """Code that makes everything under ``prefix`` unwritable, as a read-only mount does even for root."""
    return f"""
import os
_access = os.access
def _ro(path, mode, *a, **k):
    if str(path).startswith({str(prefix)!r}) and mode & os.W_OK:
        return False
    return _access(path, mode, *a, **k)
os.access = _ro
"""


def full_disk(name: str) -> str:
    """Code that makes writing a file called ``name`` run out of space half-way."""
    return f"""
import errno
import distsim.outputs as _o
_write_file = _o.write_file
def _full(path, write):
    if str(path).endswith({name!r}):
        def half(tmp):
            with open(tmp, "wb") as fh:
                fh.write(b"PAR1 half a table")
            raise OSError(errno.ENOSPC, "No space left on device")
        return _write_file(path, half)
    return _write_file(path, write)
_o.write_file = _full
"""


def run_patched(patch: str, module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(patched(patch, module, *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def completed(code: int, capsys) -> subprocess.CompletedProcess:
    """An in-process main()'s status and output, shaped for assert_user_error."""
    out = capsys.readouterr()
    return subprocess.CompletedProcess([], code, out.out, out.err)


def no_temporary_files(folder: Path) -> bool:
    return not list(folder.rglob("*.tmp"))


@pytest.fixture(scope="module")
def ray_session():
    with local_ray():
        yield


@pytest.fixture(scope="module")
def finished_sweep(ray_session, tmp_path_factory) -> Path:
    """A finished sweep of 3 jobs; tests copy it before changing it."""
    out = tmp_path_factory.mktemp("finished")
    outcome = sweep([*SMALL, "seed=0,1,2"], out, num_workers=2, progress=False, echo=False)
    assert outcome.ok == 3
    return out


def copy_of(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "sweep"
    shutil.copytree(finished, out)
    return out


# --- the one writer -------------------------------------------------------------------------------


def test_a_failed_write_leaves_no_file_and_keeps_the_previous_one(tmp_path):
    target = tmp_path / "table.parquet"
    outputs.write_parquet(target, pd.DataFrame({"a": [1, 2]}))
    before = target.read_bytes()

    def half(tmp: str) -> None:
        Path(tmp).write_bytes(b"PAR1 half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError) as err:
        outputs.write_file(target, half)
    assert str(target) in str(err.value) and "No space left on device" in str(err.value)
    assert target.read_bytes() == before and no_temporary_files(tmp_path)
    with pytest.raises(OutputError, match="is a directory"):
        outputs.write_text(tmp_path, "x")


def test_a_single_run_that_fills_the_disk_leaves_no_summary(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_patched(full_disk("requests.parquet"), "distsim", *SMALL, f"hydra.run.dir={run_dir}")
    assert_user_error(proc, 2, str(run_dir / "requests.parquet"), "No space left on device")
    names = {p.name for p in run_dir.iterdir()}
    assert "summary.json" not in names and "requests.parquet" not in names and no_temporary_files(run_dir)


def test_single_run_writes_summary_last_and_drops_an_earlier_runs_files(tmp_path, monkeypatch):
    result = simulate(load_config([*SMALL, "policy.trace_decisions=true"]))
    result.write(tmp_path)
    assert (tmp_path / "decisions.parquet").exists()
    order = []
    real = outputs.write_file

    def spy(path, write):
        order.append(Path(path).name)
        return real(path, write)

    monkeypatch.setattr(outputs, "write_file", spy)
    simulate(load_config(SMALL)).write(tmp_path, write_requests=False)
    assert order[-1] == "summary.json"
    assert not (tmp_path / "decisions.parquet").exists() and not (tmp_path / "requests.parquet").exists()


@pytest.mark.parametrize("case", ["file", "under_file", "read_only"])
def test_a_bad_run_directory_is_one_line_before_hydra_makes_it(tmp_path, case):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    patch = ""
    if case == "file":
        run_dir = blocker
    elif case == "under_file":
        run_dir = blocker / "run"
    else:
        run_dir = tmp_path / "ro" / "run"
        (tmp_path / "ro").mkdir()
        patch = read_only(tmp_path / "ro")
    proc = run_patched(patch, "distsim", *SMALL, f"hydra.run.dir={run_dir}")
    assert_user_error(proc, 2, str(run_dir), "hydra.run.dir")
    assert not (tmp_path / "ro" / "run").exists()


@pytest.mark.parametrize("case", ["full_disk", "hydra_is_a_file"])
def test_a_failed_write_of_hydras_own_record_is_one_line_naming_the_file(tmp_path, case):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if case == "full_disk":  # writing .hydra/config.yaml runs out of space, as on a full disk
        (run_dir / ".hydra").mkdir()
        (run_dir / ".hydra" / "config.yaml").symlink_to("/dev/full")
        needles = (str(run_dir / ".hydra" / "config.yaml"), "No space left on device")
    else:
        (run_dir / ".hydra").write_text("not a directory")
        needles = (str(run_dir / ".hydra"),)
    proc = run_module("distsim", *SMALL, f"hydra.run.dir={run_dir}")
    line = assert_user_error(proc, 2, *needles)
    assert proc.stderr.strip() == line and not (run_dir / "summary.json").exists()


def test_a_bad_search_directory_is_one_line(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    proc = run_module("distsim.search", f"hydra.run.dir={blocker}")
    assert_user_error(proc, 2, str(blocker), "hydra.run.dir")


@pytest.mark.parametrize("case", ["file", "read_only"])
def test_a_bad_sweep_directory_is_one_line_before_ray_starts(tmp_path, case):
    sweep_dir = tmp_path / "sweep"
    patch = ""
    if case == "file":
        sweep_dir.write_text("x")
    else:
        sweep_dir.mkdir()
        patch = read_only(sweep_dir)
    proc = run_patched(SAYS_IF_RAY_IMPORTED + patch, "distsim", "-m", *SMALL, "seed=0,1", *RUNNER, f"hydra.sweep.dir={sweep_dir}")
    assert_user_error(proc, 2, str(sweep_dir))
    assert "RAY IMPORTED" not in proc.stdout and "Ray workers" not in proc.stderr  # before Ray, not "within 30 s"


def test_a_sweep_that_fills_the_disk_keeps_its_jobs_and_resumes(ray_session, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *SMALL, "seed=0,1", *RUNNER, f"hydra.sweep.dir={sweep_dir}"]
    proc = run_patched(full_disk("results.parquet"), "distsim", *args, timeout=600)
    assert_user_error(proc, 2, str(sweep_dir / "results.parquet"), "No space left on device")
    assert not (sweep_dir / "results.parquet").exists() and no_temporary_files(sweep_dir)
    assert all((sweep_dir / str(i) / "result.json").exists() for i in (0, 1))
    again = sweep([*SMALL, "seed=0,1"], sweep_dir, progress=False, echo=False)  # the same sweep
    assert again.resumed == 2 and again.workers == 0  # every job was kept: none runs again
    assert len(pd.read_parquet(sweep_dir / "results.parquet")) == 2


# --- validate, calibrate, report: --out --------------------------------------------------------------


@pytest.mark.parametrize("case", ["file", "read_only"])
def test_validate_calibrate_and_report_refuse_a_bad_out(tmp_path, case, capsys, monkeypatch, finished_sweep):
    from distsim.calibrate import main as calibrate_main
    from distsim.report import main as report_main
    from distsim.validate import main as validate_main

    out = tmp_path / "out"
    if case == "file":
        out.write_text("x")
    else:
        out.mkdir()
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if str(p).startswith(str(out)) else real(p, m))
    assert_user_error(completed(validate_main([FIDELITY_RUN, "--out", str(out)]), capsys), 2, str(out))
    fit = out / "fit.json"
    code = calibrate_main(["runs", FIDELITY_RUN, "--iterations", "1", "--workers", "1", "--out", str(fit)])
    assert_user_error(completed(code, capsys), 2, str(fit))
    code = report_main([str(finished_sweep), "--out", str(out / "report")])
    assert_user_error(completed(code, capsys), 2, str(out))


@pytest.mark.parametrize("count", ["0", "-3", "many"])
def test_calibrate_iterations_must_be_a_positive_count(count, capsys):
    from distsim.calibrate import main as calibrate_main

    with pytest.raises(SystemExit) as exit_:
        calibrate_main(["runs", FIDELITY_RUN, "--iterations", count])
    assert_user_error(completed(exit_.value.code, capsys), 2, "--iterations")


def test_report_names_the_jobs_without_requests_and_draws_no_empty_cdf(finished_sweep, tmp_path, capsys):
    from distsim.report import main as report_main

    out = copy_of(finished_sweep, tmp_path)
    for job in (0, 2):
        (out / str(job) / "requests.parquet").unlink()
    assert report_main([str(out)]) == 0
    warning = capsys.readouterr().err
    assert "2 of 3 ok jobs have no requests.parquet" in warning and "jobs 0, 2" in warning
    assert (out / "report" / "latency_cdf.png").exists()  # job 1 still has its requests
    (out / "1" / "requests.parquet").unlink()
    assert report_main([str(out)]) == 0
    assert "latency_cdf.png is not drawn" in capsys.readouterr().err
    assert not (out / "report" / "latency_cdf.png").exists()
    assert "jobs 0, 1, 2" in (out / "report" / "report.md").read_text()


@pytest.mark.parametrize("name", ["results.parquet", "ranking.csv", "1/requests.parquet"])
def test_report_on_a_broken_sweep_file_is_one_line(finished_sweep, tmp_path, capsys, name):
    from distsim.report import main as report_main

    out = copy_of(finished_sweep, tmp_path)
    (out / name).write_bytes(b"\x00garbage, not a table\n")
    assert_user_error(completed(report_main([str(out)]), capsys), 2, str(out / name))


# --- one sweep per directory, one driver at a time ------------------------------------------------------


def test_a_different_sweep_into_a_used_directory_is_refused(finished_sweep, tmp_path):
    out = copy_of(finished_sweep, tmp_path)
    before = (out / "results.parquet").read_bytes()
    proc = run_module("distsim", "-m", *SMALL, "policy=random", "seed=0,1", *RUNNER, f"hydra.sweep.dir={out}")
    assert_user_error(proc, 2, str(out), "another sweep", "runner.overwrite")
    assert (out / "results.parquet").read_bytes() == before
    assert json.loads((out / "sweep_id.json").read_text())["jobs"][0] == f"{' '.join(SMALL)} seed=0"
    again = sweep([*SMALL, "seed=0,1,2"], out, progress=False, echo=False)  # the same sweep resumes
    assert again.resumed == 3 and again.workers == 0


def test_overwrite_replaces_the_other_sweep_entirely(finished_sweep, tmp_path):
    out = copy_of(finished_sweep, tmp_path)
    (out / "report").mkdir()
    outcome = sweep([*SMALL, "seed=5"], out, num_workers=1, progress=False, echo=False, overwrite=True)
    assert outcome.ok == 1 and outcome.resumed == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["0"]  # no orphaned job of the old sweep
    assert pd.read_parquet(out / "results.parquet")["seed"].tolist() == [5]


def test_a_directory_from_before_the_record_resumes_only_its_own_sweep(finished_sweep, tmp_path):
    out = copy_of(finished_sweep, tmp_path)
    (out / "sweep_id.json").unlink()
    with pytest.raises(UserError, match="another sweep"):
        sweep([*SMALL, "seed=7,8,9"], out, progress=False, echo=False)
    again = sweep([*SMALL, "seed=0,1,2"], out, progress=False, echo=False)
    assert again.resumed == 3


def test_a_second_driver_on_the_same_directory_stops_at_once(finished_sweep, tmp_path):
    out = copy_of(finished_sweep, tmp_path)
    with open(out / claim.LOCK_FILE, "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = run_module("distsim", "-m", *SMALL, "seed=0,1,2", *RUNNER, f"hydra.sweep.dir={out}")
    assert_user_error(proc, 2, str(out), "in use by another sweep driver")


def row_received(flag: Path) -> str:
    """Code that creates ``flag`` once the sweep driver holds its first finished job's row: a job's
    result.json on disk is not enough, the driver gets the row later (much later on a busy machine)."""
    return f"""
import pathlib
import distsim.runner.sweep as _sweep
_on_row = _sweep._on_row
def _flagging(progress, rows):
    on_row = _on_row(progress, rows)
    def flagged(row):
        on_row(row)
        pathlib.Path({str(flag)!r}).touch()
    return flagged
_sweep._on_row = _flagging
"""


def test_ctrl_c_writes_the_finished_jobs_and_exits_130(tmp_path):
    sweep_dir, flag = tmp_path / "sweep", tmp_path / "first_row"
    # jobs long enough (about 1.5 s each) that the other five cannot all finish before the signal lands
    args = ["-m", "workload.num_requests=20000", "cluster.instances=2", "seed=range(6)", *RUNNER]
    proc = subprocess.Popen(
        patched(row_received(flag), "distsim", *args, f"hydra.sweep.dir={sweep_dir}"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C as at a terminal, whatever an earlier test left this process's SIGINT as (an ignored
        # signal stays ignored across exec, and then the driver never hears it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 300  # Ray's start-up and a first job, on a machine however busy
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists(), "the driver never received a row"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)  # a bound on waiting for a stuck driver, not a check
    done = assert_user_error(subprocess.CompletedProcess([], proc.returncode, out, err), 130, "interrupted")
    results = pd.read_parquet(sweep_dir / "results.parquet")
    assert 1 <= len(results) < 6 and (results["status"] == "ok").all()
    assert f"{len(results)} of 6 jobs" in done and str(sweep_dir / "results.parquet") in done
    assert json.loads((sweep_dir / "sweep.json").read_text())["interrupted"] is True


# --- the cluster address ------------------------------------------------------------------------------


def test_an_unreachable_cluster_fails_at_once_naming_runner_address(tmp_path):
    proc = run_patched(SAYS_IF_RAY_IMPORTED, "distsim", "-m", *SMALL, "seed=0,1", "runner.address=127.0.0.1:1",
                       f"hydra.sweep.dir={tmp_path / 's'}")  # fmt: skip
    assert_user_error(proc, 2, "runner.address", "127.0.0.1:1")
    assert "RAY IMPORTED" not in proc.stdout  # the TCP probe answered, not Ray's ~20 s of retries
    assert not (tmp_path / "s" / "sweep_id.json").exists()


def test_a_cluster_ray_cannot_join_is_a_config_error(monkeypatch):
    import ray

    from distsim.runner import session

    def refuse(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConfigError, match="runner.address.*Could not find any running Ray instance"):
        session.connect("auto")
    with pytest.raises(ConfigError, match="runner.address.*HOST:PORT"):
        session.connect("127.0.0.1:port")


# --- search ---------------------------------------------------------------------------------------------


def test_a_search_whose_every_candidate_fails_writes_no_policy(ray_session, tmp_path):
    """In-process on the module's Ray (python -m distsim.search prints a UserError as this line, status 2)."""
    from hydra import compose, initialize_config_dir

    from distsim.config.compose import CONF_DIR
    from distsim.config.schema import register_schemas
    from distsim.search.driver import SearchFailed, run_search
    from distsim.search.evaluate import make_evaluator

    register_schemas()
    out = tmp_path / "search"
    space = "++search.space={policy.routing.load_guard:{type:int,low:-5,high:-1}}"
    settings = ["search.population=4", "search.generations=2", "search.train_seeds=[0]", "search.holdout_seeds=[]",
                "search.algorithm=cmaes", "search.objectives=fitness"]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("search", overrides=[space, *settings, *SMALL, *RUNNER])
        with pytest.raises(SearchFailed) as err:
            run_search(cfg, out, list(SMALL), evaluate=make_evaluator(cfg.runner, config_name="search"), echo=False)
    message = str(err.value)
    assert "\n" not in message and "every candidate" in message and "policy.routing.load_guard" in message
    assert not (out / "policy").exists() and not (out / "gen_001").exists()
