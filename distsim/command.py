"""The outer edge every ``python -m distsim...`` command shares: a standard output that cannot be written,
a project error no handler took, and Ctrl-C.

Why: a command's files are its results; what it prints is a report on them. When standard output is a
full device (``> /dev/full``) or a pipe whose reader has gone (``| head -1``), print() raises OSError at
whichever line next fills the buffer, or Python's flush at exit does: a traceback after the work is done,
or "Exception ignored" and status 120. And Ctrl-C outside a handler is a KeyboardInterrupt traceback.

:func:`run` runs a command's main with standard output wrapped, so that a failed write raises
:class:`StdoutError` (an OutputError: the commands' own handlers print it as one line, status 2, like any
failed write) and file descriptor 1 then points at /dev/null, so that nothing more is written and Python's
flush at exit cannot fail again (the Python docs' note on SIGPIPE). It flushes before it exits, so output
still buffered fails inside the guard, and turns a KeyboardInterrupt that no handler took into one line
and status 130 (the shell's for SIGINT). Files are written before the report is printed, so they are kept.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn, TextIO

from distsim.errors import OutputError, UserError, os_reason

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped


class StdoutError(OutputError):
    """Standard output could not be written (a full device, a closed pipe); the files are written."""

    def __init__(self, err: OSError):
        super().__init__("standard output", f"could not be written ({os_reason(err)})")


class _CheckedStdout:
    """sys.stdout, with a failed write or flush raised as StdoutError after silencing descriptor 1."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            raise _failed(self._stream, err) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            raise _failed(self._stream, err) from None

    def __getattr__(self, name: str) -> object:  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self._stream, name)


def _failed(stream: TextIO, err: OSError) -> StdoutError:
    """Point the stream's descriptor at /dev/null: what is still buffered, and any later print, go there."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no descriptor (a replaced stream): nothing to silence
        pass
    return StdoutError(err)


def check_stdout() -> None:
    """Wrap sys.stdout (once) so that a failed write raises StdoutError; see the module docstring."""
    if not isinstance(sys.stdout, _CheckedStdout):
        sys.stdout = _CheckedStdout(sys.stdout)  # type: ignore[assignment]


@contextlib.contextmanager
def starting(prog: str) -> Iterator[None]:
    """A command's imports, before :func:`run` guards its main: Ctrl-C there (the first half second of a
    ``python -m distsim``) is the same one line and status 130, not a traceback from inside an import."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"{prog}: interrupted while starting: nothing written", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None


def run(prog: str, main: Callable[[], int | None]) -> NoReturn:
    """Run ``main`` (a command's main function) with standard output checked, a project error
    (:class:`~distsim.errors.UserError`) its own handlers did not take as one line, and Ctrl-C as one line,
    and exit with its status: 2 if standard output failed or a project error escaped, 130 if interrupted.
    Every ``python -m distsim...`` entry point runs its main through here (tests/test_entry_points.py)."""
    check_stdout()
    try:
        try:
            code = main()
        except SystemExit as done:
            code = done.code
        sys.stdout.flush()
    except UserError as err:  # a standard output that failed (StdoutError), or any project error no handler took
        print(f"{prog}: {err}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as err:  # one a handler gave a message (RunInterrupted), or a bare Ctrl-C
        lead = "\n" if sys.stderr.isatty() else ""  # end a progress line first
        print(f"{lead}{prog}: {err or 'interrupted'}", file=sys.stderr)
        code = INTERRUPTED
    # Python's exit collects every object the command made (a full cycle collection over the run's world,
    # tables and Hydra's config: tens of milliseconds) only to free memory the process gives back anyway.
    # Frozen objects are left out of it. The files are written and closed by now; logging flushes at exit.
    gc.freeze()
    sys.exit(code)
