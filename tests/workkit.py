"""Bounds on work instead of on wall-clock time: a test that must fail fast counts the Python function
calls its block makes, which a busy machine cannot change (a clock bound failed under load and passed alone)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class WorkExceeded(BaseException):  # not an Exception: the code under test cannot catch it as its own error
    pass


@dataclass
class Count:
    calls: int = 0


@contextmanager
def call_budget(limit: int) -> Iterator[Count]:
    """Count the Python calls made in the block; past ``limit`` the block stops with WorkExceeded (a
    regression to per-layer or per-token loops stops at once rather than running for hours)."""
    count = Count()
    before = sys.getprofile()

    def profile(frame, event, arg):  # noqa: ARG001
        if event == "call":
            count.calls += 1
            if count.calls > limit:
                sys.setprofile(None)
                raise WorkExceeded(f"more than {limit:,} Python calls")

    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(before)
