"""How long Ray may take to start, and at what priority its workers run: ``runner.start_timeout_s`` and
``runner.worker_niceness``.

Why: on a busy machine (load 20 on 2 cores) the raylet registered with the GCS 35-52 s after the GCS
started, and Ray 2.60 waits a fixed 30 s for that (``ray._private.node.Node.__init__``,
``raylet_start_wait_time_s = 30``, a local variable no setting reaches), then raises "The current node
timed out during startup" from inside ray.init. Ray also starts its workers 15 nice levels below the
raylet (its ``worker_niceness`` setting, ``RAY_worker_niceness``), so on a shared machine a sweep's jobs ran
at a few percent of a core beside anything at normal priority.

:func:`bounded` wraps a start: for its duration Ray's registration check (``services.get_node``) polls
until ``start_timeout_s`` has passed, whatever Ray's own 30 s, and the GCS's port-file wait gets the same
bound (``RAY_gcs_server_port_wait_time_s``, which Ray reads, and for a driver joining a cluster its GCS
connect retries); a start that still times out raises :class:`StartTimedOut` naming what did. The worker
priority is Ray's own mechanism: ``RAY_worker_niceness`` in the actors' runtime environment (as Ray's job
manager sets it to 0 for its supervisors), an increment over the raylet's niceness, which a local Ray
inherits from the driver.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from distsim.errors import UserError
from distsim.runner import faults

TIMEOUT_KEY = "runner.start_timeout_s"
NICENESS_KEY = "runner.worker_niceness"
GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
NICENESS_ENV = "RAY_worker_niceness"
POLL_S = 0.2


class StartTimedOut(Exception):
    """One attempt to start (or join) Ray ran past the bound; ``what`` names the step."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(what)


class RayStartError(UserError):
    """Ray did not start within runner.start_timeout_s on either try: one line, exit 2."""

    def __init__(self, what: str, bound_s: float, tries: int):
        super().__init__(
            f"Ray did not start: {what} within {bound_s:g} s ({TIMEOUT_KEY}), on each of {tries} tries; "
            f"on a busy machine raise {TIMEOUT_KEY}"
        )


def _registration_wait(original: Callable[..., Any], deadline: float, late_until: float) -> Callable[..., Any]:
    """services.get_node, retried until ``deadline``: Node's own loop then sees the node or our timeout.
    Before ``late_until`` (a test's fault, distsim.runner.faults) the node counts as not registered."""

    def get_node(gcs_address: str, node_id: str) -> Any:
        while True:
            try:
                if time.monotonic() < late_until:
                    raise RuntimeError("not registered yet (DISTSIM_FAULT_REGISTER_LATE_S)")
                return original(gcs_address, node_id)
            except RuntimeError:  # not registered yet: what Ray's loop catches
                if time.monotonic() > deadline:
                    raise StartTimedOut("the raylet did not register with the GCS") from None
                time.sleep(POLL_S)

    return get_node


def _port_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    def wait_for_persisted_port(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception as err:  # Ray's binding raises a plain error on its timeout
            raise StartTimedOut(f"the GCS did not report its port ({str(err).strip().splitlines()[0]})") from None

    return wait_for_persisted_port


@contextlib.contextmanager
def bounded(bound_s: float) -> Iterator[None]:
    """Ray's start-up waits bounded by ``bound_s`` for the block (see the module docstring)."""
    before = os.environ.get(GCS_WAIT_ENV)
    os.environ[GCS_WAIT_ENV] = str(max(1, math.ceil(bound_s)))
    patched: list[tuple[Any, str, Any]] = []
    try:
        from ray._private import node, services

        now = time.monotonic()
        patched = [(services, "get_node", services.get_node), (node, "wait_for_persisted_port", node.wait_for_persisted_port)]
        services.get_node = _registration_wait(services.get_node, now + bound_s, now + faults.register_late_s())
        node.wait_for_persisted_port = _port_wait(node.wait_for_persisted_port)
    except (ImportError, AttributeError):  # another Ray: the environment variable is all we have
        pass
    try:
        yield
    except Exception as err:
        if "timed out during startup" in str(err):  # Ray's own 30 s, should another path reach it
            raise StartTimedOut("the node did not start (Ray: the current node timed out during startup)") from None
        raise
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
        if before is None:
            os.environ.pop(GCS_WAIT_ENV, None)
        else:
            os.environ[GCS_WAIT_ENV] = before


@contextlib.contextmanager
def keeping_sigterm_handler() -> Iterator[None]:
    """ray.init replaces the process's SIGTERM handler with one that raises SystemExit; a handler the
    process installed itself (a test runner's, which stops the run on SIGTERM) is put back after it. The
    default disposition is left to Ray, as before."""
    mine = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        yield
    finally:
        if callable(mine):
            signal.signal(signal.SIGTERM, mine)


def with_one_retry(start: Callable[[], Any], bound_s: float, clean_up: Callable[[], None] = lambda: None) -> Any:
    """``start()`` under :func:`bounded`; once more after a timeout (``clean_up`` between), then
    RayStartError naming what timed out and the setting."""
    for attempt in (1, 2):
        try:
            with bounded(bound_s), keeping_sigterm_handler():
                return start()
        except StartTimedOut as err:
            clean_up()
            if attempt == 2:
                raise RayStartError(err.what, bound_s, attempt) from None
    raise AssertionError("unreachable")


def worker_env(niceness: int) -> dict[str, str]:
    """The actors' runtime-env variables: Ray's worker niceness increment (0: the raylet's priority)."""
    return {NICENESS_ENV: str(niceness)}
