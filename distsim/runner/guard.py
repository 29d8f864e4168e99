"""Stop a private local Ray's processes once the driver that started it is gone (run as a script).

    python -I guard.py RAY_TEMP_DIR DRIVER_PID

The driver (distsim.runner.local_ray) starts this with a pipe as stdin, and writes the Ray session
directory to it once Ray is up. When the pipe reaches EOF (the driver shut Ray down, exited, crashed or
was killed with SIGKILL) or this process gets SIGTERM, it kills every process of that session that is
still alive. Why: when the driver dies, Ray kills its own children (GCS, raylet) through the kernel, but
the raylet's dashboard and runtime-env agents try to report the raylet's death to the dead GCS first and
stay up for about a minute.

A process belongs to the session when it runs Ray's Python or one of Ray's binaries and its command line
names the session directory or it holds a file open in it (its logs). Agents and workers rename
themselves (``ray::DashboardAgent``), so the open log files are what finds them. Standard library only,
so that it starts in milliseconds; it prints nothing.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import time

GIVE_UP_S = 10.0  # a process that survives SIGKILL this long is not ours to wait for


class _Stop(Exception):
    pass


def _stop(*_: object) -> None:
    raise _Stop


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def fd_targets(pid: int | str) -> list[str]:
    """What a process's file descriptors point to (paths, ``socket:[INODE]``...); [] if unreadable."""
    targets = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return targets
    for fd in fds:
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return targets


def _holds_file_in(pid: str, dirs: list[str]) -> bool:
    return any(target.startswith(d + "/") for target in fd_targets(pid) for d in dirs)


def session_pids(dirs: list[str], programs: tuple[str, ...], spare: set[int]) -> list[int]:
    """Live processes of the sessions in ``dirs`` that run one of ``programs`` (paths or prefixes)."""
    found = []
    names = [d.encode() for d in dirs]
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in spare:
            continue
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue  # gone, a zombie, or not ours
        if not exe.startswith(programs):
            continue
        cmdline = _read(f"/proc/{pid}/cmdline")
        if any(n in cmdline for n in names) or _holds_file_in(pid, dirs):
            found.append(int(pid))
    return found


def kill_session(dirs: list[str], programs: tuple[str, ...], spare: set[int]) -> None:
    """SIGKILL until none is left (a raylet may start a worker while we kill)."""
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        pids = session_pids(dirs, programs, spare)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def main(argv: list[str]) -> None:
    temp_dir, driver = argv[0], int(argv[1])
    programs = tuple(argv[2:])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; we clean up after it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal kills the driver, not the clean-up
    signal.signal(signal.SIGTERM, _stop)
    told = b""
    try:
        while chunk := os.read(0, 4096):
            told += chunk
    except (_Stop, OSError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # now nothing stops the clean-up half-way
    dirs = [os.path.realpath(d) for d in told.decode(errors="replace").splitlines() if d.startswith("/")]
    if not dirs:  # the driver died while Ray was starting: its sessions are named after its pid
        dirs = [os.path.realpath(d) for d in glob.glob(os.path.join(temp_dir, f"session_*_{driver}"))]
    if dirs:
        kill_session(dirs, programs, {os.getpid(), driver})


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception:  # never a traceback on the user's terminal from a clean-up helper
        sys.exit(1)
