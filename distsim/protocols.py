"""Declared interfaces: what the simulation's top level, a replica and a signal source offer.

Why protocols: the run (distsim.simulate), the metrics and the timeline read a plain cluster
(distsim.cluster.cluster.Cluster), a fleet of cells (distsim.cells.fleet.Fleet) or the front that routes
requests by type over a cluster (distsim.runtime.front.TypedFront) alike; a signal board and the views
read an LLM engine (distsim.instance.instance.Instance) and a batching runtime's replica
(distsim.runtime.replica.RuntimeReplica) alike. Each member named here is always present on every
implementation (empty, None or 0 where it does not apply), so a reader never probes for it.

Annotations only: nothing is checked per event. tests/test_protocols.py checks that every implementation
carries every member. The module sits at the bottom of the import order (the standard library and
distsim.request only), so any package may name these types.

A world is generic in what it is built of, which the metrics read in depth: its engines and its pools
(the run builds ``World[Instance, PoolSpec]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from distsim.request import Request

if TYPE_CHECKING:
    from distsim.instance.departure import DepartureListener


class Row(Protocol):
    """One of a signal board's per-replica counters (a numpy int64 array): a source writes its own row."""

    def __setitem__(self, index: int, value: int, /) -> None: ...


class SignalSink(Protocol):
    """The rows of a signal board (distsim.signals.board.SignalBoard) that every source writes."""

    @property
    def waiting(self) -> Row: ...

    @property
    def running(self) -> Row: ...

    @property
    def kv_used(self) -> Row: ...

    @property
    def queued_tokens(self) -> Row: ...


class KvBlocks(Protocol):
    """A replica's KV cache as the board and the metrics read it: blocks in all, in use, evicted."""

    @property
    def total(self) -> int: ...

    @property
    def evictions(self) -> int: ...

    def used(self) -> int: ...


@runtime_checkable
class SignalSource(Protocol):
    """What a signal board reads of a replica: its KV cache's size, its row in the board's arrays
    (``slot``, set by the board), and its state, pushed on every change once ``attach``-ed (a policy reads
    signals live) or written on demand by ``publish_to`` (a scrape)."""

    slot: int

    @property
    def kv(self) -> KvBlocks: ...

    def attach(self, board: SignalSink, /) -> None: ...

    def publish_to(self, board: SignalSink, /) -> None: ...


class RunSource(SignalSource, Protocol):
    """A source whose fast-forwarded decode runs the board follows (an Instance; a runtime starts none):
    the blocks its run holds at ``now`` and the last instant that count holds (-1: until the run ends)."""

    def run_blocks_at(self, now: int, /) -> tuple[int, int]: ...


@runtime_checkable
class Replica(SignalSource, Protocol):
    """One server of requests, an LLM engine or a batching runtime's replica: its global number (its row
    of instances.parquet), who hears of each request that leaves it (distsim.instance.departure), and what the cluster or the front does
    with it: hand it a request, list what it holds, settle its busy time at the horizon, check its
    invariants (raising SimulationError)."""

    @property
    def index(self) -> int: ...

    @property
    def departure_listeners(self) -> list[DepartureListener]: ...

    def enqueue(self, req: Request, now: int, /) -> None: ...

    def in_flight(self) -> list[Request]: ...

    def settle(self, horizon_us: int, /) -> None: ...

    def check_invariants(self) -> None: ...


class RuntimeBatch(Protocol):
    """One batch a batching runtime ran (distsim.runtime.batcher.Batch), as the timeline draws it."""

    @property
    def requests(self) -> tuple[Request, ...]: ...

    @property
    def items(self) -> int: ...

    @property
    def size(self) -> float: ...

    @property
    def start_us(self) -> int: ...

    @property
    def end_us(self) -> int: ...

    @property
    def full(self) -> bool: ...


class BatchingReplica(Protocol):
    """A batching runtime's replica (distsim.runtime.replica.RuntimeReplica) as a measurement window and the
    timeline read it: its number, the batches it ran, its pool, its busy time."""

    index: int
    batches: list[RuntimeBatch]
    pool: Any  # its distsim.runtime pool spec: name, hardware
    serves: str
    stats: Any  # RuntimeStats: busy_us

    def busy_ended_us(self) -> int: ...


class RecordSink(Protocol):
    """Where a request goes with its final status: the recorder (distsim.metrics.recorder.Recorder), or
    a tap in front of it (autoscaling's, which also tells the autoscaler)."""

    def done(self, req: Request, /) -> None: ...


E_co = TypeVar("E_co", bound=Replica, covariant=True)  # a world's LLM engines
P_co = TypeVar("P_co", covariant=True)  # its pool specs


@runtime_checkable
class World(Protocol[E_co, P_co]):
    """The simulation's top level, as the run and the metrics use it: what every run has.

    Run: ``feed`` the requests, run the loop, ``finish`` at the horizon (every request still inside is
    recorded unfinished), ``warn_refusals``; ``check_invariants`` raises SimulationError (a cluster also
    returns where each request in flight is). Read: the LLM engines (``instances``, global numbers in
    order) and their pools (``pool_of``, by instance number), the first arrival, the routing decisions
    (None unless policy.trace_decisions) and the listeners told of events no table keeps (the timeline is
    one). What only some runs have (hedgers, an autoscaler, cells, runtimes, P/D transfers) is its
    feature's (distsim.feature, distsim.world), not the world's."""

    @property
    def instances(self) -> Sequence[E_co]: ...

    @property
    def pool_of(self) -> Sequence[P_co]: ...

    @property
    def listeners(self) -> list: ...  # a cluster's: ClusterListeners; a fleet's: told of the front's picks

    @property
    def first_arrival_us(self) -> int | None: ...

    def feed(self, requests: Iterable[Request], /) -> None: ...

    def finish(self, horizon_us: int | None, /) -> None: ...

    def warn_refusals(self) -> None: ...

    def decision_table(self) -> object | None: ...  # decisions.parquet's rows (a DataFrame), None untraced

    def check_invariants(self) -> Mapping[int, str] | None: ...
