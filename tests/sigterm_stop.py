"""A pytest plugin: SIGTERM stops the run as Ctrl-C does, and no Ray outlives it.

Why: the suite ran past its time on a loaded machine and a SIGTERM did not stop it (ray.init installs a
SIGTERM handler that raises SystemExit, which pytest records as one test's failure and goes on), so it had
to be killed, leaving Ray's processes behind. Here SIGTERM raises KeyboardInterrupt: pytest stops, prints
its summary and tears the fixtures down (a module's Ray session shuts down; distsim's local Ray keeps this
handler over ray.init, distsim.runner.startup.keeping_sigterm_handler); at the end a Ray still initialised
in this process is shut down. A second SIGTERM ends the process at once. tests/conftest.py loads it;
another pytest run can with ``-p sigterm_stop``.
"""

from __future__ import annotations

import signal
import sys
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, as pytest's own Ctrl-C: stop, report, tear down."""


def _stop(signum: int, frame: object) -> None:  # noqa: ARG001
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process
    raise Terminated("SIGTERM: the run was stopped")


def pytest_configure(config) -> None:  # noqa: ARG001
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)


def pytest_unconfigure(config) -> None:  # noqa: ARG001
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # a Ray a test left running: ours to stop
        ray.shutdown()
