"""Windowed prefill batching: new prompts wait for a batch (``prefill_batch_min`` requests) or a window.

Continuous batching starts a prompt at the first step boundary after it arrives, so under light load
prefill steps carry one prompt each. Windowed batching (the LLM inference simulator seed's "wait for a
minimum batch or a time window, with a wake-up event"; a Triton batcher's queue delay) holds new prompts
so that several start in one step: fewer, fuller prefill steps, at the price of the wait.

The rule, per instance. A new prompt arriving when nothing else waits in its queue starts a batch; every
new prompt arriving while a batch is held joins it. The batch closes, and all of it becomes ordinary
waiting work, when

- it holds ``prefill_batch_min`` requests (when the min-th arrives), or
- its prompts hold ``max_num_batched_tokens`` tokens (a step could not take more, so waiting longer
  cannot make the first prefill step bigger: the analogue of a batcher's maximum batch size), or
- its oldest request has waited ``prefill_batch_window_ms`` since it reached the instance: a wake-up event
  at that instant (PRIO_CLUSTER, so it comes before the instance's step at the same time).

A closed batch joins at the next step boundary, as an arrival does: an idle instance wakes, a
fast-forwarded decode run is cut there. A prompt arriving while earlier ones still wait unheld (a closed
batch that the budget, the sequence cap or the blocks have not let in yet) is not held: the queue is
already forming the next batch, and under load windowed batching becomes continuous batching.

Not held: preempted requests waiting for their recompute and requests back from a CPU KV tier load (both
go to the front of the queue and were admitted once), and P/D requests landing on a decode instance (they
need no prefill). While a batch is held, the step's admission takes only the requests ahead of it in the
queue (those), in queue order, then stops: INV-14's no-skipping holds. Running decoders keep stepping.
Held requests count as waiting in every signal (queue depth, queued tokens), in vLLM's DP balancer and in
an autoscaler's drain check, since they are queued on the instance.

An instance idle while its queue holds only a held batch is waiting for the batch's wake-up, not
deadlocked: INV-12 accepts it only while that wake-up is scheduled. INV-25 (docs/invariants.md) is what
:meth:`PrefillBatcher.check` verifies.

How it plugs in: a queueing discipline is chosen when the instance is built. The instance builds a
:class:`PrefillBatcher` when its settings ask for windowed batching and then calls the batcher's
:meth:`~PrefillBatcher.enqueue` for each new prompt and its :meth:`~PrefillBatcher.admit_waiting` in each
step's admission, instead of its own ``join_waiting`` and ``admit_waiting`` (which the batcher calls in turn,
the latter over the part of the queue it lets in). The option off (the default) builds nothing here: the
instance's own methods run unchanged.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from distsim.errors import SimulationError
from distsim.events.loop import PRIO_CLUSTER
from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.engine import Engine
    from distsim.request import Request

WAITING = Phase.WAITING


def batching_on(batch_min: int | None, window_us: int) -> bool:
    """Whether these settings hold anything (a min of 1 or a window of 0 is continuous batching)."""
    return window_us > 0 and (batch_min is None or batch_min > 1)


class _Front:
    """The first ``n`` requests of a waiting queue, as the admission loop reads a queue: what it may admit
    while a batch behind them is held."""

    __slots__ = ("queue", "n")

    def __init__(self, queue, n: int):
        self.queue = queue
        self.n = n

    def __len__(self) -> int:
        return self.n

    def peek(self) -> Request:
        return self.queue.peek()

    def popleft(self) -> Request:
        self.n -= 1
        return self.queue.popleft()


class PrefillBatcher:
    """One instance's held batch of new prompts, its wake-up, and the counters behind instances.parquet's
    ``prefill_batch_*`` columns."""

    def __init__(self, inst: Engine, batch_min: int | None, window_us: int):
        self.inst = inst
        self.min = batch_min if batch_min is not None else 1 << 62  # null: only the window or the budget
        self.window_us = window_us
        self.held: deque[tuple[int, Request]] = deque()  # (time it reached the instance, request), oldest first
        self.held_tokens = 0
        self.timer_us: int | None = None  # the pending wake-up, if any
        self.timer_tag = 0  # the live wake-up's tag: one of a batch closed early finds it changed (a no-op)
        self.batches = 0  # batches closed
        self.expired = 0  # of them, closed by the window's end
        self.held_requests = 0  # requests that were held
        self.hold_us = 0  # summed over held requests: time from reaching the instance to their batch's close

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, req: Request, now: int) -> None:
        """A new prompt reaches the queue: it starts or joins the held batch, or (others already wait
        unheld) queues as under continuous batching."""
        inst = self.inst
        if not (self._live() or not inst.waiting):
            inst.join_waiting(req, now)
            return
        inst.waiting.append(req)
        inst.waiting_tokens += req.prompt_tokens + req.generated
        inst.publish_queue()
        req.seq.enqueued_us = now
        self.held.append((now, req))
        self.held_tokens += req.prompt_tokens
        self.held_requests += 1
        if len(self.held) >= self.min or self.held_tokens >= inst.max_tokens:
            self._close(now, expired=False)
        elif self.timer_us is None:
            self._set_timer(self.held[0][0] + self.window_us)

    def _set_timer(self, at_us: int) -> None:
        self.timer_us = at_us
        self.timer_tag += 1
        self.inst.loop.schedule(at_us, PRIO_CLUSTER, self._on_timer, self.timer_tag)

    def _on_timer(self, now: int, tag: int) -> None:
        """The wake-up: the window of the oldest request still held has ended (or, that one cancelled,
        the wake-up moves to the next one's). A wake-up of a batch closed early is stale: nothing to do."""
        if tag != self.timer_tag:
            return
        self.timer_us = None
        if not self._live():
            return
        deadline = self.held[0][0] + self.window_us
        if deadline > now:
            self._set_timer(deadline)
        else:
            self._close(now, expired=True)

    def _live(self) -> deque:
        """The held batch without requests cancelled meanwhile (a hedge's losing copy leaves the queue)."""
        held = self.held
        if held and any(req.seq.phase is not WAITING for _, req in held):
            self.held = held = deque((t, req) for t, req in held if req.seq.phase is WAITING)
            self.held_tokens = sum(req.prompt_tokens for _, req in held)
        return held

    def _close(self, now: int, expired: bool) -> None:
        """The batch becomes ordinary waiting work and joins at the next step boundary."""
        inst = self.inst
        head_was_held = len(inst.waiting) == len(self.held)
        self.batches += 1
        self.expired += expired
        self.hold_us += sum(now - t for t, _ in self.held)
        for _, req in self.held:
            req.seq.enqueued_us = now  # async scheduling: the scheduler sees the batch from its close
        self.held.clear()
        self.held_tokens = 0
        if self.timer_us is not None:  # closed before its window ended: its wake-up goes stale (the cluster
            self.timer_tag += 1  # drops stale ones once every request is recorded, so none prolongs the run)
            self.timer_us = None
        if not inst.busy:
            inst.wake(now)
        elif head_was_held:  # else a request ahead of it is blocked and the batch could not join anyway
            inst.cut_run(now, inst.lag)

    # ------------------------------------------------------------------ admission
    def admit_waiting(self, waiting, now: int, budget: int, need_dec: int, chunks: list) -> int:
        """The step's admission from the ``waiting`` queue: as usual with no batch held; else only the
        requests queued ahead of the held batch (recomputes, loads landed from the CPU tier)."""
        held = self._live()
        if not held:
            return self.inst.admit_waiting(waiting, now, budget, need_dec, chunks)
        ahead = len(waiting) - len(held)
        if ahead <= 0:
            return budget
        return self.inst.admit_waiting(_Front(waiting, ahead), now, budget, need_dec, chunks)

    # ------------------------------------------------------------------ checks
    def waits_for_wake_up(self) -> bool:
        """INV-12: an idle instance may wait only for its held batch's wake-up (nothing else queued)."""
        inst = self.inst
        held = self._live()
        return bool(held) and self.timer_us is not None and len(inst.waiting) == len(held) and not (
            inst.landed or inst.awaiting_blocks
        )

    def check(self) -> None:
        """INV-25: held requests are new prompts queued here; a held batch is below its closing sizes and
        has its wake-up pending no later than its oldest request's window end."""
        inst = self.inst
        held = self._live()
        where = f"INV-25: instance {inst.index}:"
        queued = {id(req) for req in inst.waiting}
        if any(id(req) not in queued or req.first_scheduled_us >= 0 for _, req in held):
            raise SimulationError(f"{where} a held request is not a new prompt in the waiting queue")
        if not held:
            return
        if len(held) >= self.min or self.held_tokens >= inst.max_tokens:
            raise SimulationError(f"{where} a batch of {len(held)} requests, {self.held_tokens} tokens still held")
        deadline = held[0][0] + self.window_us
        if self.timer_us is None or self.timer_us > deadline or deadline < inst.loop.now:
            raise SimulationError(f"{where} held batch's wake-up {self.timer_us} misses its window end {deadline}")
