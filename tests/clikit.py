"""Run a distsim command line in a subprocess and check that a user's mistake reads as one plain line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_module(module: str, *args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` with captured text output."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def patched(patch: str, module: str, *args: str) -> list[str]:
    """The command line of ``python -m MODULE ARGS`` with ``patch`` run first in the same process."""
    code = f"{patch}\nimport runpy, sys\nsys.argv = [{module!r}, *{list(args)!r}]\n"
    code += f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    return [sys.executable, "-c", code]


# run first (clikit.patched): says at exit whether ray was imported, i.e. whether Ray's start-up (or its
# ~20 s of connection retries) could have begun: "fails before Ray" shown without a clock
SAYS_IF_RAY_IMPORTED = "import atexit, sys\natexit.register(lambda: 'ray' in sys.modules and print('RAY IMPORTED'))\n"


def assert_user_error(proc: subprocess.CompletedProcess, status: int, *needles: str) -> str:
    """The command failed with ``status``, printed no traceback, and its error line names every needle.

    Returns the error line (the last non-empty line of stderr; warnings may precede it).
    """
    assert proc.returncode == status, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines, "no message on stderr"
    message = lines[-1]
    for needle in needles:
        assert needle in message, (needle, message)
    return message
