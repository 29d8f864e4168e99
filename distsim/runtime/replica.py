"""One runtime replica: a Triton-like server of one model on one GPU, driven by events.

Why events at three moments only: a request's arrival (it queues, and a batch may leave), a batch's end (a
slot frees, a batch may leave), and the window's wake-up (the head's ``batch_window_ms`` ran out while no
batch was full). Batches in flight run independently, each at the service curve's latency: ``concurrency``
models Triton's instance-group count, whose copies share the GPU; set it to what the GPU sustains, or fit
the curve under that concurrency. A request with more items than ``max_batch_size`` can never run and is
dropped on arrival, as Triton refuses a batch dimension over the model's maximum.

The replica is a signal source (distsim.protocols.SignalSource: ``slot``, ``kv.total``, ``attach``,
``publish_to``) as an LLM engine is, so the configured router ranks replicas through the same views it
ranks engines with: queue depth is queued requests, running the requests in running batches, queued
tokens the queued items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.errors import SimulationError
from distsim.events.loop import PRIO_INSTANCE, EventLoop
from distsim.instance.departure import Departure, DepartureListener
from distsim.protocols import SignalSink
from distsim.request import Request, Status
from distsim.runtime.batcher import Batch, Batcher

if TYPE_CHECKING:
    from distsim.runtime.settings import RuntimePoolSpec

FINISHED = Departure.FINISHED


class _NoKv:
    """A runtime has no KV cache: one nominal block, never used (KV utilisation reads 0)."""

    total = 1
    evictions = 0

    def used(self) -> int:
        return 0


class RuntimeStats:
    __slots__ = ("busy_us", "completed", "dropped", "admitted", "busy_since", "last_end_us")

    def __init__(self) -> None:
        self.busy_us = 0  # time with at least one batch running
        self.completed = self.dropped = self.admitted = 0
        self.busy_since = -1
        self.last_end_us = -1  # when the last batch ended (a measurement window credits busy time up to it)


class RuntimeReplica:
    """A replica (distsim.protocols.Replica), and a signal source to its type's board."""

    def __init__(self, index: int, pool: RuntimePoolSpec, loop: EventLoop):
        self.index, self.pool, self.loop = index, pool, loop
        self.serves, self.curve = pool.serves, pool.curve
        self.concurrency = pool.concurrency
        self.batcher = Batcher(pool.max_batch_size, pool.window_us)
        self.prio = PRIO_INSTANCE + index
        self.kv = _NoKv()
        self.slot = 0
        self.board: SignalSink | None = None
        # told of each request that leaves (distsim.instance.departure): the front first, then a drain's
        self.departure_listeners: list[DepartureListener] = []
        self.stats = RuntimeStats()
        self.running: dict[int, Batch] = {}  # by a batch number
        self.batches: list[Batch] = []  # every batch started, in start order
        self._timer = -1  # the wake-up pending for this instant (-1: none)

    # ------------------------------------------------------------------ signals
    def attach(self, board: SignalSink) -> None:
        self.board = board
        self.publish_to(board)

    def publish_to(self, board: SignalSink) -> None:
        i = self.slot
        board.waiting[i] = len(self.batcher)
        board.running[i] = sum(len(b.requests) for b in self.running.values())
        board.kv_used[i] = 0
        board.queued_tokens[i] = self.batcher.items

    def _publish(self) -> None:
        if self.board is not None:
            self.publish_to(self.board)

    # ------------------------------------------------------------------ events
    def enqueue(self, req: Request, now: int) -> None:
        req.instance = self.index
        req.enqueue_us = now
        if req.items > self.batcher.max_items:
            req.status = Status.DROPPED
            self.stats.dropped += 1
            for listener in self.departure_listeners:
                listener(req, now, FINISHED)
            return
        self.batcher.add(req, now)
        self._dispatch(now)
        self._publish()

    def _dispatch(self, now: int) -> None:
        """Start batches while a slot is free and one may leave; else wake up when the head's window ends."""
        batcher = self.batcher
        while len(self.running) < self.concurrency and batcher.ready(now):
            self._start(now)
        deadline = batcher.deadline()
        if len(self.running) < self.concurrency and deadline is not None and deadline > now and deadline != self._timer:
            self._timer = deadline
            self.loop.schedule(deadline, self.prio, self._wake, deadline)

    def _start(self, now: int) -> None:
        requests, items, oldest, full = self.batcher.take()
        size = max(r.size for r in requests)
        end = now + self.curve.batch_us(items, size)
        batch = Batch(tuple(requests), items, size, oldest, now, end, full)
        if not self.running:
            self.stats.busy_since = now
        number = len(self.batches)
        self.running[number] = batch
        self.batches.append(batch)
        for req in requests:
            req.first_scheduled_us = now
        self.stats.admitted += len(requests)
        self.loop.schedule(end, self.prio, self._done, number)

    def _wake(self, now: int, deadline: int) -> None:
        if self._timer == deadline:
            self._timer = -1
        self._dispatch(now)
        self._publish()

    def _done(self, now: int, number: int) -> None:
        batch = self.running.pop(number)
        self.stats.last_end_us = now
        if not self.running:
            self.stats.busy_us += now - self.stats.busy_since
        for req in batch.requests:
            req.completion_us = req.last_token_us = now
            req.status = Status.COMPLETED
            self.stats.completed += 1
            for listener in self.departure_listeners:
                listener(req, now, FINISHED)
        self._dispatch(now)
        self._publish()

    # ------------------------------------------------------------------ end of run
    def in_flight(self) -> list[Request]:
        """Requests queued or in a running batch."""
        return [r for r, _ in self.batcher.queue] + [r for b in self.running.values() for r in b.requests]

    def busy_ended_us(self) -> int:
        """Busy time credited at batch ends: up to the last batch that ended (in a busy period still going on,
        the time since its last batch end is not yet credited). A measurement window snapshots it at its
        edges, as it does a vLLM instance's busy time of the steps ended by then."""
        s = self.stats
        if self.running and s.last_end_us > s.busy_since:
            return s.busy_us + s.last_end_us - s.busy_since
        return s.busy_us

    def settle(self, horizon_us: int) -> None:
        """At the horizon: the GPU's busy time up to it."""
        if self.running:
            self.stats.busy_us += horizon_us - self.stats.busy_since
            self.stats.busy_since = horizon_us

    def check_invariants(self) -> None:
        """INV-26: at most ``concurrency`` batches run, none over max_batch_size items, and the queue's item count
        is its requests' (distsim/docs/invariants.md)."""
        if len(self.running) > self.concurrency:
            raise SimulationError(f"INV-26: runtime {self.index}: {len(self.running)} batches over concurrency {self.concurrency}")
        for b in self.running.values():
            if b.items > self.batcher.max_items or b.items != sum(r.items for r in b.requests):
                raise SimulationError(f"INV-26: runtime {self.index}: a batch of {b.items} items (max {self.batcher.max_items})")
        if self.batcher.items != sum(r.items for r, _ in self.batcher.queue):
            raise SimulationError(f"INV-26: runtime {self.index}: queued items miscounted")
