"""The commands' outer edge (distsim.command): a full or closed standard output after the files are
written, and Ctrl-C of a single run. Each is one line on stderr with its status (2: a failed write;
130: interrupted), no traceback, and no file half-written: a file is whole or absent, and a run
interrupted before its summary keeps none of its files."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clikit import ROOT, patched

SMALL = ["workload.num_requests=20", "cluster.instances=1"]
RUN_FILES = {"summary.json", "requests.parquet", "instances.parquet", "perf.json", "timeline.json"}

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full") or sys.platform != "linux", reason="Linux's /dev/full")


def one_line(proc: subprocess.CompletedProcess, status: int, *needles: str) -> str:
    """The command exited ``status`` with exactly one non-empty line on stderr, naming every needle."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == status, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def run_to(stdout: int | str, command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``command`` with standard output on ``stdout``: a file name or an open descriptor."""
    fd = os.open(stdout, os.O_WRONLY) if isinstance(stdout, str) else stdout
    try:
        return subprocess.run(command, cwd=ROOT, stdout=fd, stderr=subprocess.PIPE, text=True, timeout=timeout)
    finally:
        os.close(fd)


def closed_pipe() -> int:
    """The writing end of a pipe whose reader has gone, as ``| head -1``'s is once head exits."""
    read, write = os.pipe()
    os.close(read)
    return write


def no_temporary_files(folder: Path) -> bool:
    return not list(folder.rglob("*.tmp"))


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", name, *args]


# --- a full or closed standard output ------------------------------------------------------------------


@pytest.mark.parametrize("stdout", ["full", "closed pipe"])
def test_a_run_whose_stdout_fails_keeps_its_files_and_says_so_in_one_line(tmp_path, stdout):
    run_dir = tmp_path / "run"
    target, reason = ("/dev/full", "No space left on device") if stdout == "full" else (closed_pipe(), "Broken pipe")
    proc = run_to(target, module("distsim", *SMALL, f"hydra.run.dir={run_dir}"))
    one_line(proc, 2, "distsim: output error: standard output", reason)
    assert {"summary.json", "requests.parquet"} <= {p.name for p in run_dir.iterdir()}


def test_calibrate_whose_stdout_is_full_keeps_its_profile(tmp_path):
    run = str(ROOT / "tests" / "fixtures" / "fidelity" / "tiny.csv")
    profile = tmp_path / "p.json"
    command = [sys.executable, "-W", "ignore::UserWarning", *module("distsim.calibrate")[1:]]  # the tiny run's
    proc = run_to("/dev/full", [*command, "runs", run, "--iterations", "1", "--workers", "1", "--out", str(profile)])
    progress = re.compile(r"^(start|iteration \d+): objective ")  # the fit's progress lines, on stderr by design
    proc.stderr = "\n".join(ln for ln in proc.stderr.splitlines() if not progress.match(ln))
    one_line(proc, 2, "distsim.calibrate: output error: standard output", "No space left on device")
    assert profile.read_text().lstrip().startswith("{")


def test_a_sweep_and_its_report_whose_stdout_is_full_keep_their_files(tmp_path):
    sweep_dir, report_dir = tmp_path / "sweep", tmp_path / "report"
    args = ["-m", *SMALL, "seed=0,1", "runner.num_workers=1", "runner.progress=false", f"hydra.sweep.dir={sweep_dir}"]
    proc = run_to("/dev/full", module("distsim", *args))  # its own Ray, on 127.0.0.1
    line = one_line(_without_sweep_banner(proc), 2, "standard output", "No space left on device")
    assert line.startswith("distsim: ")
    assert {"results.parquet", "ranking.csv", "sweep.json"} <= {p.name for p in sweep_dir.iterdir()}
    proc = run_to("/dev/full", module("distsim.report", str(sweep_dir), "--out", str(report_dir)))
    one_line(proc, 2, "distsim.report: output error: standard output", "No space left on device")
    assert (report_dir / "report.md").is_file() and no_temporary_files(report_dir)


def _without_sweep_banner(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The sweep's stderr less its opening ``sweep: N jobs on ...`` line (information, not an error)."""
    kept = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("sweep: "))
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, kept)


# --- Ctrl-C of a single run ---------------------------------------------------------------------------


def at_terminal() -> None:
    """Ctrl-C as at a terminal, whatever this process's SIGINT is (an ignored one survives exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=at_terminal
    )


def finished(proc: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_files(run_dir: Path) -> set[str]:
    return {p.name for p in run_dir.iterdir() if p.name != ".hydra" and not p.name.endswith(".log")}


INTERRUPT_AT_IMPORT = """
import importlib.abc, os, signal, sys

class _Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["INTERRUPT_AT"]:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C just as the command imports this module
        return None

sys.meta_path.insert(0, _Interrupt())
"""


@pytest.mark.parametrize("module_name", ["distsim.simulate", "distsim.run_dir"])  # the package's imports, then __main__'s
def test_ctrl_c_while_starting_is_one_line_and_exit_130(tmp_path, module_name):
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_AT_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "INTERRUPT_AT": module_name}
    done = subprocess.run([sys.executable, "-m", "distsim", f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, preexec_fn=at_terminal)
    one_line(done, 130, "distsim: interrupted while starting: nothing written")
    assert not (tmp_path / "run").exists() and done.stdout == ""


def test_ctrl_c_while_simulating_writes_nothing_and_exits_130(tmp_path):
    run_dir = tmp_path / "run"
    proc = started(module("distsim", "workload.num_requests=300000", f"hydra.run.dir={run_dir}"))
    deadline = time.monotonic() + 600  # a bound on waiting, not a check
    while not (run_dir / ".hydra" / "overrides.yaml").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # into the simulation (300,000 requests: far longer than this on any machine)
    assert proc.poll() is None, "the run ended before the signal"
    proc.send_signal(signal.SIGINT)
    done = finished(proc)
    one_line(done, 130, "distsim: interrupted while simulating", str(run_dir))
    assert run_files(run_dir) == set() and done.stdout == ""


def self_interrupt(where: str) -> str:
    """Code that sends this process SIGINT at ``where``: half-way through writing timeline.json's temporary
    file, or in the parent once the first regret replay has come back."""
    if where == "writing":
        return """
import os, signal
import distsim.outputs as _o
_write_file = _o.write_file
def _interrupted(path, write):
    if str(path).endswith("timeline.json"):
        def half(tmp):
            with open(tmp, "w") as fh:
                fh.write('{"traceEvents": [')
                fh.flush()
                os.kill(os.getpid(), signal.SIGINT)
                fh.write("never")
        return _write_file(path, half)
    return _write_file(path, write)
_o.write_file = _interrupted
"""
    return """
import os, signal
import distsim.regret.fork as _f
_fork = _f.Forks._fork
def _interrupted(self, req, now, stop):
    got = _fork(self, req, now, stop)
    if got is not None:  # the parent, with the first replay's outcome
        os.kill(os.getpid(), signal.SIGINT)
    return got
_f.Forks._fork = _interrupted
"""


def test_ctrl_c_while_writing_leaves_no_file_of_the_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{}")  # an earlier run's: removed first, so never mixed
    proc = started(patched(self_interrupt("writing"), "distsim", *SMALL, "sim.timeline=true", f"hydra.run.dir={run_dir}"))
    one_line(finished(proc), 130, "distsim: interrupted while writing the outputs: none kept", str(run_dir))
    assert run_files(run_dir) == set() and no_temporary_files(run_dir)


def test_ctrl_c_during_regret_replays_keeps_the_run_and_writes_no_regret(tmp_path):
    run_dir = tmp_path / "run"
    args = ["workload.num_requests=200", "cluster.instances=2", "regret.samples=5", f"hydra.run.dir={run_dir}"]
    proc = started(patched(self_interrupt("regret"), "distsim", *args))
    one_line(finished(proc), 130, "distsim: interrupted during the regret replays", "without regret.json")
    names = run_files(run_dir)
    assert {"summary.json", "requests.parquet"} <= names and not any(n.startswith("regret") for n in names)
    assert no_temporary_files(run_dir)
