"""The local Ray a sweep starts (distsim/runner/local_ray.py): every Ray server listens on 127.0.0.1, no
token-authentication warning, nothing left running after a ``kill -9`` of the driver; and a bad search
setting is refused before Ray starts. One sweep driver serves the first three tests (about 15 s)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clikit import ROOT, assert_user_error

from distsim.errors import ConfigError
from distsim.runner.guard import fd_targets

LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


def _listening() -> dict[str, str]:
    """Socket inode -> "address:port" of every listening TCP socket (IPv4 and IPv6)."""
    out = {}
    for family, path in ((socket.AF_INET, "/proc/net/tcp"), (socket.AF_INET6, "/proc/net/tcp6")):
        for line in Path(path).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            raw_ip, raw_port = fields[1].split(":")
            raw = bytes.fromhex(raw_ip)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
            out[fields[9]] = f"{socket.inet_ntop(family, raw)}:{int(raw_port, 16)}"
    return out


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process; None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else (int(fields[1]), fields[19])


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live process below ``root``."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            parent[int(name)] = st
    found = {}
    for pid, (ppid, start) in parent.items():
        p = ppid
        while p > 1 and p != root:
            p = parent.get(p, (0, ""))[0]
        if p == root:
            found[pid] = start
    return found


def sockets_of(pid: int, listening: dict[str, str]) -> list[str]:
    inodes = [t[8:-1] for t in fd_targets(pid) if t.startswith("socket:[")]
    return [listening[i] for i in inodes if i in listening]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
    except OSError:
        return "?"


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory):
    """A sweep driver, watched while its jobs run, then killed with SIGKILL."""
    out = tmp_path_factory.mktemp("killed")
    err = out / "stderr.txt"
    args = ["workload.num_requests=3000", "cluster.instances=2", "seed=range(40)", "runner.num_workers=2"]
    with open(err, "w") as fh:
        driver = subprocess.Popen(
            [sys.executable, "-m", "distsim", "-m", *args, "runner.progress=false", f"hydra.sweep.dir={out / 's'}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=fh,
        )  # fmt: skip
    deadline = time.monotonic() + 600  # a bound on waiting for Ray on a loaded machine, not a check of speed
    while driver.poll() is None:  # until both workers run (every Ray process has started by then)
        assert time.monotonic() < deadline, "the workers did not start"
        procs = descendants(driver.pid)
        if sum(command(pid).startswith("ray::SimWorker") for pid in procs) == 2:
            break
        time.sleep(0.2)
    assert driver.poll() is None, err.read_text()[-2000:]
    time.sleep(0.5)  # a process that has just started may not listen yet
    listening = _listening()
    procs = descendants(driver.pid)
    seen = {pid: (command(pid), sockets_of(pid, listening)) for pid in procs}
    guards = [pid for pid in procs if b"runner/guard.py" in _cmdline(pid)]
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # what is left once the guard has done its work: counted, not timed (Ray's agents would linger a
    # minute on their own, so a clock bound could not tell "killed" from "exited late" on a busy machine)
    deadline = time.monotonic() + 600
    while any(_stat(pid) for pid in guards) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = lambda pid, start: (_stat(pid) or (0, ""))[1] == start  # noqa: E731
    left = {pid: start for pid, start in procs.items() if alive(pid, start) and pid not in guards}
    return {"seen": seen, "guards": guards, "left": {pid: seen[pid][0] for pid in left}, "stderr": err.read_text()}


def test_every_ray_server_listens_on_loopback_only(killed_sweep):
    seen = killed_sweep["seen"]
    addresses = [(cmd, a) for cmd, socks in seen.values() for a in socks]
    assert len(addresses) >= 8, seen  # GCS, raylet, both agents, two workers, the driver: a real look
    assert any("raylet" in cmd for cmd, _ in addresses) and any("gcs_server" in cmd for cmd, _ in addresses)
    elsewhere = [(cmd, a) for cmd, a in addresses if a.rsplit(":", 1)[0] not in LOOPBACK]
    assert not elsewhere, elsewhere


def test_no_token_warning_and_no_dashboard_ui(killed_sweep):
    assert "Token authentication" not in killed_sweep["stderr"], killed_sweep["stderr"][-2000:]
    dashboards = [cmd for cmd, _ in killed_sweep["seen"].values() if "dashboard/dashboard.py" in cmd]
    # Ray's head process always runs; without the dashboard it loads the usage-stats module only
    assert all("--modules-to-load=UsageStatsHead" in c or "--disable-frontend" in c for c in dashboards)


def test_kill_9_of_the_driver_leaves_no_ray_process(killed_sweep):
    assert len(killed_sweep["seen"]) >= 8
    assert len(killed_sweep["guards"]) == 1
    assert not killed_sweep["left"], killed_sweep["left"]  # before: both agents for about a minute


def test_a_bad_search_setting_is_refused_before_ray_starts(tmp_path):
    """Before: refused after Ray's start-up (and its token warning)."""
    said = "import atexit, sys\natexit.register(lambda: 'ray' in sys.modules and print('RAY IMPORTED'))\n"
    code = f"{said}import runpy\nsys.argv = ['distsim.search', 'search.generations=0', 'hydra.run.dir={tmp_path}']\n"
    code += "runpy.run_module('distsim.search', run_name='__main__')\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    line = assert_user_error(proc, 2, "search.generations", "must be >= 1")
    assert line.startswith("distsim.search: ") and "RAY IMPORTED" not in proc.stdout


@pytest.mark.parametrize(
    "setting, key",
    [("runner.num_workers=0", "runner.num_workers"), ("cluster.instances=0", "cluster.instances"),
     ("search.algorithm=bogus", "search.algorithm"), ("search.population=1", "search.population")],
)  # fmt: skip
def test_the_search_checks_runner_settings_and_the_scenario_first(setting, key):
    """What python -m distsim.search checks before it starts Ray (before: the runner's settings once Ray
    was up, the scenario only in the jobs of the first generation)."""
    from hydra import compose, initialize_config_dir

    from distsim.config.compose import CONF_DIR
    from distsim.config.schema import register_schemas
    from distsim.search.driver import check_settings

    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("search", overrides=[setting])
    with pytest.raises(ConfigError) as info:  # the scenario warns of nothing: a new warning fails here
        check_settings(cfg)
    assert info.value.key == key
