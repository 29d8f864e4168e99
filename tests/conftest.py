"""Suite-wide hooks: SIGTERM stops the run like Ctrl-C, and no Ray outlives it (tests/sigterm_stop.py)."""

from sigterm_stop import pytest_configure, pytest_unconfigure  # noqa: F401  (pytest reads hooks by name)
