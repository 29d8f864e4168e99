"""Faults of a real cluster, on the local Ray: a worker process killed from outside mid-sweep, the disk
filling up during a search's candidate writes, a job's result file corrupted before a resume. Each
recovers or stops with one line; nothing is lost, no result counts twice, and where the docs promise it
the results are byte-identical to a run without the fault. (Killing the search's driver and resuming it:
tests/test_search.py; a full disk under a sweep's own tables: tests/test_bad_inputs_outputs.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from clikit import ROOT
from raykit import local_ray
from test_search import CMAES, FAMILIES, run, search_cfg
from test_search import SMALL as SMALL_SEARCH

from distsim import outputs
from distsim.errors import OutputError, UserError
from distsim.runner.api import sweep

sys.path.insert(0, str(ROOT / "scripts"))
from soak_sweep import soak  # noqa: E402

SMALL = ["workload.num_requests=200", "cluster.instances=2"]
WAIT_S = 600  # a bound on waiting for a loaded machine, not a check of speed


@pytest.fixture(scope="module")
def ray_session():
    with local_ray():
        yield


def test_workers_killed_mid_sweep_every_job_once_and_identical(ray_session, tmp_path):
    """The soak's small version (scripts/soak_sweep.py; its 2,000-job run: scripts/results/soak_sweep.txt):
    a SimWorker SIGKILLed after every 6 finished jobs."""
    job = ["workload.num_requests=300", "cluster.instances=1", "workload.arrival.rate_rps=20"]
    figures, kills = soak(18, tmp_path / "sweep", every_jobs=6, job=job)
    assert kills, "no worker was killed: the jobs ended before the first kill"
    assert figures["rows"] == figures["distinct_jobs"] == figures["ok"] == figures["result_files"] == 18
    assert 1 <= figures["retried"] <= len(kills) and figures["replaced_workers"] >= figures["retried"]
    n = min(5, figures["retried"])
    assert figures["retried_checked_identical"] == f"{n} of {n}"


@pytest.fixture(scope="module")
def whole_search(ray_session, tmp_path_factory):
    """One generation of test_search's small search, run without a fault: what each faulted run must match."""
    out = tmp_path_factory.mktemp("whole")
    return run(search_cfg(1), out), out


def test_a_search_driver_killed_mid_generation_resumes_to_the_same_candidates(whole_search, tmp_path):
    """kill -9 of ``python -m distsim.search`` once some of a generation's jobs are done (its lock and its
    Ray go with it), then the same command again: the finished jobs are not run twice and
    candidates.parquet is byte-identical to an uninterrupted search's (docs/guide/search.md)."""
    _, whole = whole_search
    out = tmp_path / "killed"
    args = [sys.executable, "-m", "distsim.search", "--config-name", "search_routing", *SMALL_SEARCH, *FAMILIES, *CMAES, "search.population=4",
            "search.generations=1", "search.train_seeds=[0,1]", "search.holdout_seeds=[]", "search.baselines=[]",
            "runner.num_workers=2", "runner.progress=false", f"hydra.run.dir={out}"]  # fmt: skip
    driver = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + WAIT_S
    while len(list(out.glob("gen_000/*/result.json"))) < 3 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.poll() is None, driver.communicate()[1][-3000:]
    driver.kill()
    driver.wait()
    done = {p.parent: p.stat().st_mtime_ns for p in out.glob("gen_000/*/result.json")}
    assert done and not (out / "candidates.parquet").exists()
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert all((job / "result.json").stat().st_mtime_ns == t for job, t in done.items())  # not run twice
    assert (out / "candidates.parquet").read_bytes() == (whole / "candidates.parquet").read_bytes()


def test_a_full_disk_during_a_searchs_candidate_writes_stops_it_and_the_rerun_is_identical(
    whole_search, tmp_path, monkeypatch
):
    """Before: the job that met the full disk failed, its candidate scored as the worst and the search went
    on, told a wrong value. Now the search stops with one line; a rerun resumes from the jobs on disk."""
    whole, whole_dir = whole_search
    out = tmp_path / "full"
    marker = tmp_path / "disk_was_full"
    monkeypatch.setenv("DISTSIM_FAULT_FULL_DISK", f"3:{marker}")  # job 3 of the first sweep that has one
    with pytest.raises(UserError, match=r"could not write its outputs .*No space left on device.*resume") as info:
        run(search_cfg(1), out)
    assert marker.exists() and "\n" not in str(info.value)
    monkeypatch.delenv("DISTSIM_FAULT_FULL_DISK")
    # the driver's own write of candidates.parquet meets the full disk next
    real = outputs.write_file

    def full(path, write):
        if Path(path).name == "candidates.parquet":
            raise OutputError(str(path), "could not be written (No space left on device)")
        return real(path, write)

    monkeypatch.setattr(outputs, "write_file", full)
    with pytest.raises(OutputError, match="candidates.parquet"):
        run(search_cfg(1), out)
    monkeypatch.setattr(outputs, "write_file", real)
    done = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    resumed = run(search_cfg(1), out)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == done  # nothing simulated again
    assert (out / "candidates.parquet").read_bytes() == (whole_dir / "candidates.parquet").read_bytes()
    assert resumed.best_overrides == whole.best_overrides and not list(out.rglob("*.tmp"))


def test_a_full_disk_in_a_sweeps_job_fails_that_job_alone_and_resume_reruns_it(ray_session, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTSIM_FAULT_FULL_DISK", f"1:{tmp_path / 'mark'}")
    first = sweep([*SMALL, "seed=0,1,2"], tmp_path / "s", num_workers=2, progress=False, echo=False)
    row = first.results.set_index("job").loc[1]
    assert row["status"] == "failed" and row["error_kind"] == "output" and "No space left on device" in row["error"]
    assert json.loads((tmp_path / "s" / "1" / "result.json").read_text())["status"] == "failed"  # not trusted
    again = sweep([*SMALL, "seed=0,1,2"], tmp_path / "s", num_workers=2, progress=False, echo=False)
    assert (again.resumed, again.ok, again.failed, len(again.results)) == (2, 3, 0, 3)


CORRUPT = {
    "torn": lambda p: p.write_text('{"status": "ok", "overr'),
    "not_utf8": lambda p: p.write_bytes(b"\xff\xfe\x00garbage"),
    "not_a_row": lambda p: p.write_text("[1, 2, 3]\n"),
    "another_jobs_row": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "overrides": "seed=99"})),
    "empty": lambda p: p.write_text(""),
}


def test_a_corrupt_result_file_on_resume_reruns_that_job_once(ray_session, tmp_path):
    """Resume trusts a job only when its result.json is a complete row of the same job: each corruption
    reruns exactly that job, the others are kept, and every job counts once."""
    out = tmp_path / "sweep"
    seeds = f"seed=range({len(CORRUPT) + 2})"
    whole = sweep([*SMALL, seeds], out, num_workers=2, progress=False, echo=False)
    keep = shutil.copytree(out, tmp_path / "whole")
    for index, corrupt in enumerate(CORRUPT.values()):
        corrupt(out / str(index) / "result.json")
    kept = len(CORRUPT) + 2 - len(CORRUPT)
    again = sweep([*SMALL, seeds], out, num_workers=2, progress=False, echo=False)
    assert (again.resumed, again.ok, len(again.results)) == (kept, len(CORRUPT) + 2, len(CORRUPT) + 2)
    assert again.results["job"].is_unique
    for index in range(len(CORRUPT) + 2):
        assert (out / str(index) / "summary.json").read_bytes() == (keep / str(index) / "summary.json").read_bytes()
    figures = [c for c in whole.results.columns if not c.startswith("run.")]
    pd.testing.assert_frame_equal(whole.results[figures], again.results[figures])
    # a folder where the marker goes cannot be replaced: that job fails with one line naming it, once
    last = out / str(len(CORRUPT) + 1) / "result.json"
    last.unlink()
    last.mkdir()
    third = sweep([*SMALL, seeds], out, num_workers=2, progress=False, echo=False)
    row = third.results.set_index("job").loc[len(CORRUPT) + 1]
    assert (third.resumed, third.ok, len(third.results)) == (len(CORRUPT) + 1, len(CORRUPT) + 1, len(CORRUPT) + 2)
    assert row["error_kind"] == "output" and row["error"] == f"output error: {last}: is a directory; give a file name"

