"""The request source's interface (distsim.workload.source builds one from the workload config)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from distsim.request import Request

if TYPE_CHECKING:
    from distsim.workload.mix import Mix


class WorkloadSource:
    """An iterable of requests; ``describe`` reports what was generated or read (may be ``{}``). What a
    source knows of itself ahead of the run (the progress line reads it) is always present: ``limit``, the
    requests it stops after, and ``duration_us``, the arrivals' span (None: not bounded that way); the
    request types besides LLM that it may emit: ``mix``, the configured mix (distsim.workload.mix), and
    ``types_seen``, those a trace's type column named so far."""

    limit: int | None = None
    duration_us: int | None = None
    mix: Mix | None = None
    types_seen: frozenset[str] | set[str] = frozenset()

    def __iter__(self) -> Iterator[Request]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict:
        return {}

    def summary(self) -> dict | None:
        """What summary.json reports under ``workload`` (None: nothing, so synthetic runs add no key)."""
        return None
