"""The request source's interface (distsim.workload.source builds one from the workload config)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

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
    driven = False  # a DrivenSource: it sends its own requests as the run goes (closed loop)
    feature = ""  # the cluster-level feature (distsim.world) that reports on this source, if any
    mix: Mix | None = None
    types_seen: frozenset[str] | set[str] = frozenset()

    def __iter__(self) -> Iterator[Request]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict:
        return {}

    def summary(self) -> dict | None:
        """What summary.json reports under ``workload`` (None: nothing, so synthetic runs add no key)."""
        return None


class ArrivalSink(Protocol):
    """What a driven source needs of the world it feeds (distsim.cluster.cluster.Intake: a cluster, a
    fleet of cells): its event loop, the listeners told of each request's final status (times as the client
    sees them), and the two calls that send a request now and say that none will come any more."""

    loop: Any  # distsim.events.loop.EventLoop
    record_listeners: list[Callable[[Request], None]]

    def arrive(self, now: int, req: Request) -> None: ...

    def end_arrivals(self) -> None: ...


class DrivenSource(WorkloadSource):
    """A source whose arrivals depend on the run (closed-loop clients, sessions that wait for replies): the
    world hands it itself (``drive``) instead of pulling requests in a fixed order, and the source schedules
    its own sends on the world's loop. Iterating it is refused: it has no order without a run."""

    driven = True

    def __iter__(self) -> Iterator[Request]:
        raise TypeError(f"{type(self).__name__} sends requests as the run goes; feed it to a world (drive)")

    def drive(self, sink: ArrivalSink) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
