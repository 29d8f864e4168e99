"""User-facing errors.

A user's mistake (a bad config value, a broken trace line) is reported as one plain line naming the key
or the file and line, never as a traceback. Everything that can be the user's fault raises a subclass
of :class:`UserError`; the command-line entry points print ``str(err)`` and exit non-zero.
"""

from __future__ import annotations

import sys
import warnings


class UserError(Exception):
    """Base class for errors caused by the user's input rather than by a bug."""


class ConfigError(UserError):
    """A config value that cannot be right. ``key`` is the dotted config path."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"config error: {key}: {message}")


class InputFileError(UserError):
    """A broken input file (trace, model config, calibration run). ``line`` is 1-based, or None."""

    def __init__(self, path: str, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"input error: {where}: {message}")


class SimulationError(Exception):
    """An internal invariant was violated (a bug, not a user error): e.g. the clock went backwards."""


class ConfigWarning(UserWarning):
    """A config that runs but probably not as meant (e.g. prefix-aware routing with prefix caching off).

    Issued through :func:`warn_config`; the command-line entry points print it as one line on stderr.
    """


def warn_config(key: str, message: str) -> None:
    """Warn once about a config contradiction that is legal but likely a mistake; ``key`` as in ConfigError."""
    warnings.warn(ConfigWarning(f"{key}: {message}"), stacklevel=2)


def print_warnings_as_lines() -> None:
    """Show ConfigWarnings as ``distsim: warning: KEY: MESSAGE``, one line each, no source line."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ConfigWarning):
            print(f"distsim: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


class OutputError(UserError):
    """An output that cannot be written (a read-only or full disk, a path that is a file). ``path`` is
    the directory or file that failed."""

    def __init__(self, path: str, message: str):
        self.path = str(path)
        self.message = message
        super().__init__(f"output error: {self.path}: {message}")


def os_reason(err: OSError) -> str:
    """An OSError as a short phrase ("No space left on device"), without the path it repeats."""
    if err.strerror:
        return err.strerror
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
