"""Test-only fault injection, read from environment variables the driver forwards to its workers.

They let the tests show the failure paths on a real Ray pool without special configs:

    DISTSIM_FAULT_RAISE=3,5          jobs 3 and 5 raise RuntimeError inside the worker (a bug-like failure)
    DISTSIM_FAULT_EXIT=2:/tmp/mark   the worker running job 2 dies with os._exit the first time
                                     (the marker file records that it did, so the retry succeeds)
    DISTSIM_FAULT_HANG=2:/tmp/mark   the worker running job 2 sleeps for ever the first time, alive but
                                     silent (with the marker as above); DISTSIM_FAULT_HANG=2: every time
    DISTSIM_FAULT_FULL_DISK=2:/tmp/mark  job 2's outputs meet a full disk (ENOSPC) the first time (the marker
                                     as above): the write fails as it would on a full disk
    DISTSIM_FAULT_REGISTER_LATE_S=40 a local Ray's raylet counts as registered only 40 s into each start
                                     (the driver reads it: as the raylet of a busy machine registers late)
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator

PREFIX = "DISTSIM_FAULT_"


def forwarded_env() -> dict[str, str]:
    """The fault variables set in the driver, to hand to the workers."""
    return {k: v for k, v in os.environ.items() if k.startswith(PREFIX)}


def _first_time(spec: str, job_index: int) -> bool:
    """Whether ``INDEX:MARKER`` names this job and its marker is absent (then written), or ``INDEX:``
    names it (every time)."""
    index, _, marker = spec.partition(":")
    if index != str(job_index):
        return False
    if not marker:
        return True
    if os.path.exists(marker):
        return False
    with open(marker, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    return True


def inject(job_index: int) -> None:
    """Raise, exit or hang here if the environment asks for it for this job."""
    raise_list = os.environ.get(PREFIX + "RAISE", "")
    if raise_list and str(job_index) in raise_list.split(","):
        raise RuntimeError(f"injected fault in job {job_index}")
    spec = os.environ.get(PREFIX + "EXIT", "")
    if spec and spec.partition(":")[2] and _first_time(spec, job_index):
        os._exit(17)
    spec = os.environ.get(PREFIX + "HANG", "")
    if spec and _first_time(spec, job_index):
        threading.Event().wait()


def register_late_s() -> float:
    """Seconds into a start before the raylet may count as registered (DISTSIM_FAULT_REGISTER_LATE_S)."""
    return float(os.environ.get(PREFIX + "REGISTER_LATE_S", "0") or 0)


@contextlib.contextmanager
def full_disk(job_index: int) -> Iterator[None]:
    """Inside the block, every file written through distsim.outputs meets ENOSPC, if the environment asks
    for it for this job (DISTSIM_FAULT_FULL_DISK, first time only)."""
    spec = os.environ.get(PREFIX + "FULL_DISK", "")
    if not (spec and spec.partition(":")[2] and _first_time(spec, job_index)):
        yield
        return
    from distsim import outputs

    original = outputs.write_file

    def full(path, write):  # noqa: ARG001
        def no_space(tmp: str) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)

        return original(path, no_space)

    outputs.write_file = full
    try:
        yield
    finally:
        outputs.write_file = original
