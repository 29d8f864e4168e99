"""SIGTERM stops a pytest run like Ctrl-C (tests/sigterm_stop.py, which tests/conftest.py loads), also
while a test holds a local Ray, and leaves no Ray process behind. Before: ray.init's own SIGTERM handler
raised SystemExit inside the test, pytest recorded one failure and went on, exit 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from clikit import ROOT
from raykit import session_processes

INNER = '''
import threading
from pathlib import Path

import pytest
from raykit import local_ray


@pytest.fixture(scope="module")
def ray_up():
    with local_ray(num_cpus=1):
        yield


def test_waits_with_ray_up(ray_up):
    Path({mark!r}).write_text("started")
    threading.Event().wait()  # until the signal


def test_never_reached():
    Path({mark!r}).write_text("went on")
'''
WAIT_S = 600  # bounds on waiting for a loaded machine, not checks of speed


def test_sigterm_stops_the_run_tears_its_ray_down_and_exits_2(tmp_path):
    mark = tmp_path / "mark"
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER.format(mark=str(mark)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "sigterm_stop", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
         str(inner)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mark.exists() and proc.poll() is None, proc.communicate()[0][-3000:]
    assert session_processes(proc.pid), "the inner run holds a Ray"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 2, out[-3000:]  # pytest's "interrupted"
    assert "SIGTERM: the run was stopped" in out and mark.read_text() == "started", out[-3000:]
    deadline = time.monotonic() + WAIT_S
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert session_processes(proc.pid) == []
