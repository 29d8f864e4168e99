"""Test helpers: the project's own local Ray (distsim.runner.session.connect: on 127.0.0.1, no dashboard,
nothing left behind), started for a test and stopped after, unless the process already runs one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[Any]:
    """A RaySession; a Ray this process already runs is reused and left running."""
    from distsim.runner.session import connect

    session = connect(None, num_cpus=num_cpus)
    try:
        yield session
    finally:
        session.shutdown()


def sweep_on_local_ray(overrides: list[str], out: Path, workers: int = 2) -> Any:
    from distsim.runner.api import sweep

    with local_ray():
        return sweep(overrides, out, num_workers=workers, progress=False, echo=False)


def session_processes(driver_pid: int) -> list[int]:
    """Live processes whose command line names a Ray session the process ``driver_pid`` started (Ray
    names its sessions after the driver's pid)."""
    import os

    tag = f"_{driver_pid}/".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if tag in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found
