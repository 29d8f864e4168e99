"""One serving instance: a vLLM V1-style step scheduler over a block KV cache.

Each step has a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs). Running
requests are served first, in admission order: a decoding request takes one token, a prefilling one
its next chunk. Waiting requests are then admitted in queue order while the budget, the cap and the KV
blocks allow; the first that does not fit stops admission (no skipping). When the blocks for the
running requests run out, the newest running request is preempted by recompute: its blocks are freed
and it goes back to the front of the waiting queue; a step that preempted admits nobody. A request's
first token comes out of the step that finishes its prefill; each later token takes one step.

Speed: per-step work does not grow with the batch. Decoding requests are never touched one by one:
they are aggregates in a :class:`~distsim.instance.decode_set.DecodeSet`. Between a join and a finish,
the free blocks permitting, a run of decode-only steps is planned in one go (a
:class:`~distsim.instance.plan.StepPlan`): the steps' end times from the latency model in one call,
block needs by phase, one event at the end. An arrival that could join cuts the run at the next step
boundary. Fast-forwarding gives exactly the results of stepping one by one (tests compare both).

The instance's bookkeeping for each request it serves is a :class:`~distsim.instance.sequence.SeqState`
on ``Request.seq``; the invariants it keeps are numbered in docs/invariants.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from distsim.errors import SimulationError
from distsim.events.loop import PRIO_CLUSTER, PRIO_INSTANCE, EventLoop
from distsim.instance.batching import PrefillBatcher, batching_on
from distsim.instance.cpu_kv import CpuKvTier
from distsim.instance.decode_set import DecodeSet, ceil_div
from distsim.instance.departure import Departure, DepartureListener
from distsim.instance.kv_cache import KVCache
from distsim.instance.latency.base import LatencyModel
from distsim.instance.phase import Phase
from distsim.instance.plan import StepPlan
from distsim.instance.queues import QUEUES
from distsim.instance.sequence import SeqState
from distsim.instance.stats import InstanceStats
from distsim.request import Request, Status

# module globals for the hot path: reading Phase.X goes through the enum's metaclass (~0.2 us a time)
WAITING, PREFILL, DECODE, DONE, HANDED_OFF = Phase
COMPLETED = Status.COMPLETED
FINISHED, ABORTED, RELEASED = Departure


@dataclass(frozen=True)
class EngineParams:
    """The resolved engine settings of one instance."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    total_kv_blocks: int
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    scheduler_reserve_full_isl: bool = True
    scheduler: str = "fcfs"
    max_model_len: int | None = None  # longest prompt + output accepted; None: no limit
    cpu_kv_blocks: int = 0  # the CPU KV tier's blocks (distsim.instance.cpu_kv); 0: none
    prefill_batch_min: int | None = None  # windowed prefill batching (distsim.instance.batching); None: no min
    prefill_batch_window_us: int = 0  # the batching window; 0: off (continuous batching)


class Instance:
    """A vLLM-like engine replica driven by the shared event loop."""

    def __init__(
        self,
        index: int,
        params: EngineParams,
        latency: LatencyModel,
        loop: EventLoop,
        *,
        fast_forward: bool = True,
        pool: str = "default",
        role: str = "mixed",
        hardware: str = "",
        gpus: int = 1,
        dp_group: int | None = None,
        cpu: CpuKvTier | None = None,
    ):
        self.index = index
        self.slot = index  # the row in the signal board's arrays (the board sets it)
        self.latency = latency
        self.loop = loop
        # told of each request that leaves: the owning cluster first (see connect), then observers
        self.departure_listeners: list[DepartureListener] = []
        self.fast_forward = fast_forward
        self.pool = pool
        self.role = role
        self.hardware = hardware
        self.gpus = gpus
        self.dp_group = index if dp_group is None else dp_group  # the configured instance (data parallelism)
        self.priority = PRIO_INSTANCE + index
        self._set_engine(params)
        self.cpu = cpu  # the CPU KV tier (distsim.instance.cpu_kv), or None
        self.stats = InstanceStats()
        self.board = None  # the cluster's SignalBoard: this instance pushes its state there
        self.step_index = 0  # steps completed
        self.busy = False  # a plan is in flight (or about to be made)
        self.version = 0  # the live event's tag: an event of a plan cut short finds it changed
        self.plan = StepPlan()
        self.decoders = DecodeSet(params.block_size)
        self._event = self._on_event  # bound once: every step schedules it
        self._set_handoff()
        self._set_cancellation()
        # the queueing discipline, chosen here once: continuous batching (this class's own arrival and
        # admission) or windowed prefill batching (distsim.instance.batching), whose two entry points the
        # hot path then calls directly
        self.batcher: PrefillBatcher | None = None
        if batching_on(params.prefill_batch_min, params.prefill_batch_window_us):
            self.batcher = PrefillBatcher(self, params.prefill_batch_min, params.prefill_batch_window_us)
        self._arrive = self._enqueue if self.batcher is None else self.batcher.enqueue
        self._admit_queue = self._admit_waiting if self.batcher is None else self.batcher.admit_waiting

    def connect(
        self,
        departed: DepartureListener,
        *,
        prefilled: Callable[[Request, int], None] | None = None,
        reserved: Callable[[Request, int], None] | None = None,
        first_token: Callable[[Request, int], None] | None = None,
    ) -> None:
        """The cluster that owns this engine, once, before the first event: ``departed`` is the first of the
        departure listeners (distsim.instance.departure); under P/D ``prefilled`` (the prompt is computed:
        send its KV) and ``reserved`` (decode side: blocks are reserved for an incoming KV); with hedging
        ``first_token`` (each request's first token here)."""
        self.departure_listeners.insert(0, departed)
        self.on_prefilled, self.on_reserved, self.on_first_token = prefilled, reserved, first_token

    def _departed(self, req: Request, now: int, how: Departure) -> None:
        for listener in self.departure_listeners:
            listener(req, now, how)

    def _set_engine(self, params: EngineParams) -> None:
        """The engine settings under the short names the hot path reads, the KV cache and the queues."""
        self.params = params
        self.bs = params.block_size
        self.max_tokens = params.max_num_batched_tokens
        self.max_seqs = params.max_num_seqs
        self.caching = params.enable_prefix_caching
        self.chunked = params.enable_chunked_prefill
        self.reserve_full = params.scheduler_reserve_full_isl
        self.max_model_len = params.max_model_len
        self.kv = KVCache(params.total_kv_blocks)
        self.waiting = QUEUES[params.scheduler]()
        self.waiting_tokens = 0  # tokens the waiting requests still have to prefill (a signal)
        self.running: dict[int, Request] = {}  # admission order
        self.prefilling: list[Request] = []  # running requests still in prefill, admission order
        self.loading: dict[int, Request] = {}  # out of the queue until their blocks land from the CPU tier

    def _set_handoff(self) -> None:
        """P/D state. Prefill side: blocks held until the KV is sent. Decode side, in the order a request
        passes through: waiting for blocks for its KV, blocks reserved while the KV moves, then landed
        (holding its blocks) waiting for a sequence slot. The cluster's callbacks come with connect."""
        self.on_prefilled: Callable[[Request, int], None] | None = None
        self.held: dict[int, tuple[list, int]] = {}
        self.awaiting_blocks: deque[Request] = deque()
        self.reserved: dict[int, Request] = {}
        self.landed: deque[Request] = deque()
        self.on_reserved: Callable[[Request, int], None] | None = None

    def _set_cancellation(self) -> None:
        """Hedging (distsim.cluster.hedging): the cluster hears of each first token, and cancels copies.
        Cancelled running requests leave at the next step boundary, loading ones when their load lands."""
        self.on_first_token: Callable[[Request, int], None] | None = None
        self.aborts: list[Request] = []
        self.abort_loads: set[int] = set()

    def forget_caches(self) -> None:
        """Empty the caches, keeping the counters (a drained engine leaves; a later start is cold): the GPU
        prefix cache, and the CPU KV tier's blocks. It holds no request, so every block is free or evictable."""
        kv = KVCache(self.kv.total)
        kv.evictions = self.kv.evictions
        self.kv = kv
        if self.cpu is not None:
            self.cpu.blocks.clear()

    def attach(self, board) -> None:
        """Push state changes to ``board`` from now on (only when a policy reads signals live)."""
        self.board = board
        self.publish_to(board)

    def publish_to(self, board) -> None:
        i = self.slot
        board.waiting[i] = len(self.waiting) + len(self.landed) + len(self.loading)
        board.running[i] = len(self.running)
        board.kv_used[i] = self.kv.used()
        if board is not self.board and self.plan.ends_us is not None:
            board.kv_used[i] += self.run_blocks_by(self.loop.now)  # a pull: what the run has taken by now
        board.queued_tokens[i] = self.waiting_tokens
        board.cached_tokens[i] = self.stats.cached_tokens
        board.prompt_tokens[i] = self.stats.prompt_tokens

    def _publish(self) -> None:
        if self.board is not None:
            self.publish_to(self.board)

    def _publish_queue(self) -> None:
        if self.board is not None:
            self.board.waiting[self.slot] = len(self.waiting) + len(self.landed) + len(self.loading)
            self.board.queued_tokens[self.slot] = self.waiting_tokens

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, req: Request, now: int) -> None:
        """A request arrives at this instance's waiting queue."""
        req.instance = self.index
        req.seq = SeqState()
        limit = self.max_model_len
        if limit is not None and req.prompt_tokens + req.output_tokens > limit:
            # vLLM's front end refuses a request whose prompt plus max_tokens exceeds max_model_len
            self.stats.too_long += 1
            self._refuse(req, now, Status.REJECTED)
        elif not self.can_ever_fit(req):
            self.stats.dropped += 1
            self._refuse(req, now, Status.DROPPED)
        else:
            self._arrive(req, now)

    def _refuse(self, req: Request, now: int, status: Status) -> None:
        req.status = status
        req.seq.phase = DONE
        self._departed(req, now, FINISHED)

    def can_ever_fit(self, req: Request) -> bool:
        """Whether the request, alone on this instance, could ever run to the end."""
        tokens = req.prompt_tokens if self.role == "prefill" else req.prompt_tokens + req.output_tokens - 1
        if tokens > self.params.total_kv_blocks * self.bs:  # more blocks than the cache holds
            return False
        return self.chunked or req.prompt_tokens <= self.max_tokens

    def _enqueue(self, req: Request, now: int) -> None:
        waiting = self.waiting
        waiting.append(req)
        self.waiting_tokens += req.prompt_tokens + req.generated
        if self.board is not None:
            self._publish_queue()
        if not self.busy:
            self._wake(now)
        elif self.plan.ends_us is not None and waiting.peek() is req:
            self._cut_run(now)

    def _cut_run(self, now: int) -> None:
        """Work that could join a fast-forwarded run arrived: end the run at the next step boundary."""
        plan = self.plan
        if plan.ends_us is not None and len(self.running) < self.max_seqs and plan.cut(now):
            self.version = version = self.version + 1
            self.loop.schedule(plan.end_us, self.priority, self._event, version)

    def _wake(self, now: int) -> None:
        """An idle instance plans a step at ``now`` (something arrived, or blocks came free)."""
        self.busy = True
        self.plan.steps = 0
        self.version = version = self.version + 1
        self.loop.schedule(now, self.priority, self._event, version)

    # ------------------------------------------------------------------ the step cycle
    def _on_event(self, now: int, version: int) -> None:
        if version != self.version:
            return  # a run that was cut short
        if self.plan.steps:
            self._apply_plan(now)
        if self.aborts:
            self._apply_aborts(now)
        self._plan_next(now)
        if self.board is not None:
            self.publish_to(self.board)

    def _apply_plan(self, now: int) -> None:
        """Everything that happens at the end of the planned step(s)."""
        stats = self.stats
        plan = self.plan
        kv = self.kv
        dec = self.decoders
        k = plan.steps
        b = plan.decoders
        start = plan.start
        last = start + k - 1
        self.step_index = last + 1
        stats.steps += k
        stats.busy_us += now - plan.begin_us
        stats.decode_tokens += b * k
        ends = plan.ends_us
        if ends is not None:  # a fast-forwarded run
            if k > 1:  # its first step took its blocks when planned; the rest take theirs now
                kv.allocate(dec.block_need(start + 1, k - 1))
            if self.board is not None:
                self.board.run_ended(self)
            if b:
                if k < len(ends):
                    del ends[k:]  # the plan's own list, dropped below
                stats.add_run(plan.begin_us, ends, b)
            plan.ends_us = None
        elif b:
            stats.itl_step_durations.append(plan.dur_us)
            stats.itl_step_weights.append(b)
        used = kv.used()
        if used > stats.peak_used_blocks:
            stats.peak_used_blocks = used
        plan.steps = 0
        chunks = plan.chunks
        if chunks:
            self._apply_prefill_chunks(now, chunks, plan.dur_us, b)
            plan.chunks = []
        heap = dec.finish_heap
        if heap and heap[0][0] <= last:
            for req in dec.finished_by(last):
                req.generated = req.output_tokens
                self._finish(req, now, dec.private_blocks(req, last))

    def _apply_prefill_chunks(self, now: int, chunks: list[tuple[Request, int]], dur_us: int, decoders: int) -> None:
        """The planned step computed these prefill chunks: cache full blocks, emit first tokens."""
        stats = self.stats
        any_done = False
        tokens = 0
        for req, n in chunks:
            seq = req.seq
            seq.computed += n
            seq.prefilled += n
            tokens += n
            if self.caching and req.block_hashes is not None:
                self._cache_full_blocks(req, seq, now)
            if seq.computed < req.prompt_tokens + req.generated:
                continue  # more chunks to go
            any_done = True
            self._prefill_done(req, now)
        stats.prefill_tokens += tokens
        stats.prefill_busy_us += dur_us * tokens / (tokens + decoders)
        if any_done:
            # a request handed off may already hold its decode instance's state (WAITING): not PREFILL
            prefilling = self.prefilling
            if len(prefilling) == 1 and prefilling[0].seq.phase != PREFILL:
                self.prefilling = []  # the common case: the one prompt in flight is done
            else:
                self.prefilling = [r for r in prefilling if r.seq.phase == PREFILL]

    def _cache_full_blocks(self, req: Request, seq: SeqState, now: int) -> None:
        """Newly full prompt blocks join the prefix cache, and are offered to the CPU tier if there is one."""
        hashes = req.block_hashes
        full = min(seq.computed // self.bs, len(hashes))
        if full > seq.hashed_blocks:
            seq.private_blocks -= self.kv.register(hashes[seq.hashed_blocks : full], seq.shared_blocks)
            seq.hashed_blocks = full
        cpu = self.cpu
        if cpu is not None and full > seq.cpu_offered and cpu.store(hashes, seq.cpu_offered, full, now):
            seq.cpu_offered = full

    def _prefill_done(self, req: Request, now: int) -> None:
        """The prompt (or a recompute) is computed: a token comes out."""
        req.generated += 1
        if req.first_token_us < 0:
            req.first_token_us = now
            if self.on_first_token is not None:
                self.on_first_token(req, now)
        else:
            self.stats.itl_single.append(now - req.last_token_us)  # first token after a recompute
        req.last_token_us = now
        if self.role == "prefill":
            self._hand_off(req, now)
        elif req.generated >= req.output_tokens:
            req.seq.phase = DONE
            self._finish(req, now, req.seq.private_blocks)
        else:
            self.decoders.join(req, self.step_index)

    def _finish(self, req: Request, now: int, private: int) -> None:
        seq = req.seq
        self.kv.release(seq.shared_blocks, private)
        seq.shared_blocks = []
        seq.private_blocks = 0
        seq.phase = DONE
        req.completion_us = now
        req.last_token_us = now
        req.status = COMPLETED
        del self.running[req.request_id]
        self.stats.completed += 1
        for listener in self.departure_listeners:
            listener(req, now, FINISHED)

    def _plan_next(self, now: int) -> None:
        """Schedule the next step (or a run of decode steps) starting at ``now``, or go idle."""
        c = self.step_index
        dec = self.decoders
        need_dec = dec.phase_counts[(1 - c) % self.bs] if dec.count else 0  # blocks step c's decoders need
        if self.prefilling or need_dec > self.kv.available():
            chunks, budget, preempted = self._schedule_running(now, need_dec)
        elif not (self.waiting or self.landed or self.awaiting_blocks):
            # decoders only, their blocks are there and nobody waits: the common case, in short
            if not dec.count:
                self._go_idle()
            elif not self.fast_forward or not self._plan_run(now, c, need_dec):
                self._plan_step(now, c, [], need_dec)
            return
        else:  # decoders only, and their blocks are there
            chunks, budget, preempted = [], self.max_tokens - dec.count, False
        if preempted:
            need_dec = 0  # allocated one by one
        # a step that preempted admits nobody (vLLM), unless it was left with nothing to run
        if (
            (self.waiting or self.landed or self.awaiting_blocks)
            and (not preempted or not (chunks or dec.count))
            and budget > 0
            and len(self.running) < self.max_seqs
        ):
            self._admit(now, budget, need_dec, chunks)
        if not chunks and not dec.count:
            self._go_idle()
        elif chunks or preempted or not self.fast_forward or not self._plan_run(now, c, need_dec):
            self._plan_step(now, c, chunks, need_dec)

    def _schedule_running(self, now: int, need_dec: int) -> tuple[list[tuple[Request, int]], int, bool]:
        """The running requests' share of the step: every decoder's token and, in admission order, the
        prefilling requests' next chunks while the budget lasts. Returns the chunks, the budget left and
        whether blocks ran short (then they were allocated one by one, with preemptions)."""
        bs = self.bs
        budget = self.max_tokens - self.decoders.count
        chunks: list[tuple[Request, int]] = []
        need = need_dec
        for req in self.prefilling:
            if budget <= 0:
                break
            seq = req.seq
            n = min(req.prompt_tokens + req.generated - seq.computed, budget)
            chunks.append((req, n))
            need += ceil_div(seq.alloc_tokens + n, bs) - ceil_div(seq.alloc_tokens, bs)
            budget -= n
        if need > self.kv.available():
            chunks, budget = self._schedule_running_with_preemption(now)
            return chunks, budget, True
        for req, n in chunks:
            self._allocate_chunk(req.seq, n)
        return chunks, budget, False

    def _allocate_chunk(self, seq: SeqState, n: int) -> None:
        """Take the blocks a prefill chunk of ``n`` tokens needs (the caller checked they are available)."""
        nb = ceil_div(seq.alloc_tokens + n, self.bs) - ceil_div(seq.alloc_tokens, self.bs)
        self.kv.allocate(nb)
        seq.alloc_tokens += n
        seq.private_blocks += nb

    def _admit(self, now: int, budget: int, need_dec: int, chunks: list[tuple[Request, int]]) -> None:
        """The step's admission phase: landed P/D requests, then waiting ones, then KV reservations."""
        if self.landed:
            budget = self._admit_landed(budget)
        if self.waiting:
            budget = self._admit_queue(self.waiting, now, budget, need_dec, chunks)
        if self.awaiting_blocks and not self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            self._reserve_incoming(now, need_dec)

    def _go_idle(self) -> None:
        self.busy = False
        self.plan.steps = 0
        # hand-offs and CPU loads in flight will wake it with an event of their own
        if (self.waiting or self.landed or self.awaiting_blocks) and not (self.held or self.reserved or self.loading):
            if self.batcher is not None and self.batcher.waits_for_wake_up():
                return  # only a held prefill batch waits, and its wake-up is scheduled (windowed batching)
            # INV-12: nothing runs and nothing in flight will free blocks or land: a deadlock (a bug)
            raise SimulationError(
                f"INV-12: instance {self.index}: idle with {len(self.waiting)} waiting, {len(self.landed)} landed"
                f" and {len(self.awaiting_blocks)} incoming requests"
            )

    def _plan_run(self, now: int, c: int, need_dec: int) -> bool:
        """Plan a run of decode-only steps from step ``c``; False when only one step could run."""
        dec = self.decoders
        run = dec.run_length(c, self.kv.available())
        if run <= 1:
            return False
        # the first step's blocks are taken now, as a single step's would be; the rest as the run is
        # applied (nothing else touches this cache meanwhile)
        if need_dec:
            self.kv.allocate(need_dec)
        b = dec.count
        plan = self.plan
        plan.run(c, now, b, self.latency.decode_run_ends(b, dec.ctx_base + b * c, run, now))
        if self.cpu is not None and self.waiting:
            # a store landing mid-run can change what the waiting head loads: replan at that boundary (INV-8)
            landing = self.cpu.next_store_landing(now)
            if landing is not None:
                plan.cut(landing)
        if self.board is not None:
            self.board.run_started(self, now)
        self.version = version = self.version + 1
        self.loop.schedule(plan.end_us, self.priority, self._event, version)
        return True

    def _plan_step(self, now: int, c: int, chunks: list[tuple[Request, int]], need_dec: int) -> None:
        """Plan one step from step ``c``: the decoders' tokens and the prefill chunks."""
        if need_dec:
            self.kv.allocate(need_dec)
        pf_tokens = pf_pairs = pf_kv = 0
        for req, n in chunks:
            c0 = req.seq.computed
            pf_tokens += n
            pf_pairs += n * c0 + n * (n + 1) // 2
            pf_kv += c0 + n
        dec = self.decoders
        b = dec.count
        dur = self.latency.step_time(pf_tokens, pf_pairs, pf_kv, b, dec.ctx_base + b * c, len(chunks))
        self.plan.step(c, now, b, chunks, dur)
        self.version = version = self.version + 1
        self.loop.schedule(now + dur, self.priority, self._event, version)

    def _schedule_running_with_preemption(self, now: int) -> tuple[list[tuple[Request, int]], int]:
        """vLLM's running loop when blocks run short: allocate in admission order, preempting the newest
        running request until the current one fits (or is itself preempted)."""
        c = self.step_index
        order = list(self.running.values())
        budget = self.max_tokens
        chunks: list[tuple[Request, int]] = []
        i = 0
        while i < len(order):
            req = order[i]
            seq = req.seq
            if seq.phase == DECODE:
                n = 1
                nb = 1 if (req.prompt_tokens + seq.decode_offset + c - 1) % self.bs == 0 else 0
            elif budget <= 0:
                i += 1
                continue
            else:
                n = min(req.prompt_tokens + req.generated - seq.computed, budget)
                nb = ceil_div(seq.alloc_tokens + n, self.bs) - ceil_div(seq.alloc_tokens, self.bs)
            if not self._make_room(nb, req, order, now):
                break
            if seq.phase == PREFILL:
                self._allocate_chunk(seq, n)
                chunks.append((req, n))
            else:
                self.kv.allocate(nb)
            budget -= n
            i += 1
        return chunks, budget

    def _make_room(self, nb: int, req: Request, order: list[Request], now: int) -> bool:
        """Preempt the newest of ``order`` until ``nb`` blocks are available; False if ``req`` itself went."""
        while nb > self.kv.available():
            victim = order.pop()
            self._preempt(victim, now)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request, now: int) -> None:
        """Preempt by recompute: free everything, back to the front of the waiting queue."""
        self._leave_running(req, now, WAITING)
        req.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(req)
        self.waiting_tokens += req.prompt_tokens + req.generated

    def _leave_running(self, req: Request, now: int, phase: Phase) -> None:
        """Take a running request out of the batch (preempted, or a cancelled hedge copy) between steps: a
        decoder's tokens so far are counted, its blocks freed, its state cleared into ``phase``."""
        c = self.step_index
        seq = req.seq
        if seq.phase == DECODE:
            self.decoders.leave(req)
            req.generated = seq.decode_offset + c
            private = self.decoders.private_blocks(req, c - 1)
            req.last_token_us = now
        else:
            private = seq.private_blocks
            self.prefilling.remove(req)
        self.kv.release(seq.shared_blocks, private)
        seq.clear(phase)
        del self.running[req.request_id]

    def _admit_waiting(
        self, waiting, now: int, budget: int, need_dec: int, chunks: list[tuple[Request, int]]
    ) -> int:
        """Admit requests from ``waiting`` (the queue, or the part of it a queueing discipline lets in) in
        queue order while budget, sequence cap and blocks allow."""
        bs = self.bs
        kv = self.kv
        cpu = self.cpu
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            req = waiting.peek()
            total = req.prompt_tokens + req.generated
            hits = from_evictable = 0
            if self.caching and req.block_hashes is not None:
                hits, from_evictable = kv.match_prefix(req.block_hashes, (total - 1) // bs)
                if cpu is not None:
                    room = kv.available() - from_evictable - need_dec
                    loading = self._load_from_cpu(waiting, req, now, total, hits, room)
                    if loading < 0:
                        break
                    if loading:
                        continue
            computed = hits * bs
            n = total - computed
            if n > budget:
                if not self.chunked and req.generated == 0:
                    break  # without chunked prefill a prompt goes in whole (recomputes are chunked)
                n = budget
            nb = -(-(computed + n) // bs) - hits  # ceil_div, inline on this path
            # vLLM's scheduler_reserve_full_isl: the blocks for the whole sequence so far must be free,
            # not only those of this step's chunk (else a long prompt is admitted and preempts others)
            need = -(-total // bs) - hits if self.reserve_full else nb
            if need > kv.available() - from_evictable - need_dec:
                break
            waiting.popleft()
            self.waiting_tokens -= total
            self._start_prefill(req, now, hits, n, nb)
            chunks.append((req, n))
            budget -= n
        return budget

    def _start_prefill(self, req: Request, now: int, hits: int, n: int, nb: int) -> None:
        """A waiting request enters the running set: ``hits`` cached prompt blocks referenced, ``nb`` new
        blocks for its first chunk of ``n`` tokens."""
        seq = req.seq
        computed = hits * self.bs
        if hits:
            shared = list(req.block_hashes[:hits])
            self.kv.reference(shared)
            seq.shared_blocks = shared
        self.kv.allocate(nb)
        seq.computed = computed
        seq.alloc_tokens = computed + n
        seq.private_blocks = nb
        seq.hashed_blocks = hits
        seq.phase = PREFILL
        if req.first_scheduled_us < 0:
            stats = self.stats
            req.first_scheduled_us = now
            req.cached_tokens = computed
            stats.admitted += 1
            stats.cached_tokens += computed
            stats.prompt_tokens += req.prompt_tokens
        self.running[req.request_id] = req
        self.prefilling.append(req)

    # ------------------------------------------------------------------ P/D disaggregation
    # Decode side: an incoming request first needs blocks for its prompt's KV and its first decode slot;
    # they are reserved in the step's admission phase (after the running requests, in arrival order, only
    # once no preempted request waits ahead, like vLLM's waiting loop), then the KV moves, then the request
    # lands holding every block its first decode step needs and waits only for a sequence slot. Landed
    # requests are admitted before requests waiting for a recompute: they need no new blocks, so they
    # never wait behind one that does (which could leave an engine whose blocks all sit in landed
    # requests with nothing to run).
    def _hand_off(self, req: Request, now: int) -> None:
        """Prefill side: the prompt is computed and the first token sampled; keep the blocks until the
        KV has been sent, free the sequence slot."""
        seq = req.seq
        del self.running[req.request_id]
        self.held[req.request_id] = (seq.shared_blocks, seq.private_blocks)
        seq.clear(HANDED_OFF)
        self.stats.handed_off += 1
        self.on_prefilled(req, now)

    def release_held(self, req: Request, now: int) -> None:
        """Prefill side: the KV transfer has finished; free the request's blocks (a waiting prompt may
        have been held back by them)."""
        shared, private = self.held.pop(req.request_id)
        self.kv.release(shared, private)
        if not self.busy and self.waiting:
            self._wake(now)
        self._publish()
        self._departed(req, now, RELEASED)

    def incoming(self, req: Request, now: int) -> None:
        """Decode side: a prefilled request wants blocks for its KV; served at the next step boundary."""
        req.instance = self.index
        req.seq = SeqState()  # this instance's own state from here on
        self.awaiting_blocks.append(req)
        if not self.busy:
            self._wake(now)
        else:
            self._cut_run(now)

    def _reserve_incoming(self, now: int, need_dec: int) -> None:
        """Reserve blocks for incoming KVs in arrival order, leaving this step's decode blocks."""
        while self.awaiting_blocks:
            req = self.awaiting_blocks[0]
            need = ceil_div(req.prompt_tokens + 1, self.bs)  # the prompt's KV and the first decode slot
            if need > self.kv.available() - need_dec:
                return
            self.awaiting_blocks.popleft()
            self.kv.allocate(need)
            seq = req.seq
            seq.private_blocks = need
            seq.alloc_tokens = req.prompt_tokens + 1
            seq.computed = req.prompt_tokens
            self.reserved[req.request_id] = req
            self.on_reserved(req, now)

    def receive(self, req: Request, now: int) -> None:
        """Decode side: the KV has landed; the request waits for a sequence slot to decode."""
        del self.reserved[req.request_id]
        req.seq.phase = WAITING
        self.landed.append(req)
        self.waiting_tokens += 1  # its next decode token
        self._publish_queue()
        if not self.busy:
            self._wake(now)
        else:
            self._cut_run(now)

    def _admit_landed(self, budget: int) -> int:
        """Decode side: landed requests join the decoders while sequence slots and budget last."""
        running = self.running
        while self.landed and budget > 0 and len(running) < self.max_seqs:
            req = self.landed.popleft()
            self.waiting_tokens -= 1
            running[req.request_id] = req
            self.stats.admitted += 1
            self.decoders.join(req, self.step_index)  # decodes in this step: generated 1 = offset + c
            budget -= 1
        return budget

    # ------------------------------------------------------------------ the CPU KV tier
    # distsim/instance/cpu_kv.py says what is modelled after vLLM's KV offloading and what is simplified.
    # Stores: _cache_full_blocks offers each newly full prompt block. Loads: below, from _admit_waiting.
    def _load_from_cpu(self, waiting, req: Request, now: int, total: int, hits: int, room: int) -> int:
        """The waiting request at the head hits ``hits`` blocks on the GPU: load the blocks that follow if
        the CPU tier holds them. 1: the load started and the request left the queue; 0: nothing to load,
        admit it as usual; -1: stop admission (too few blocks: ``room`` is what an admission may take now;
        or its blocks are being loaded for another request and will soon hit on the GPU)."""
        cpu = self.cpu
        hashes = req.block_hashes
        cpu.touch(hashes, len(hashes))  # vLLM touches a request's blocks on every lookup
        n = cpu.lookup(hashes, hits, (total - 1) // self.bs, now)
        if n <= 0:
            return n
        # as for a prefill: the blocks for the whole sequence, or for what it takes now (the loaded ones)
        need = ceil_div(total, self.bs) - hits if self.reserve_full else n
        if need > room:
            return -1
        waiting.popleft()
        self.waiting_tokens -= total
        seq = req.seq
        if hits:
            seq.shared_blocks = list(hashes[:hits])
            self.kv.reference(seq.shared_blocks)
        self.kv.allocate(n)
        seq.private_blocks = n
        self.loading[req.request_id] = req
        landed = cpu.start_load(hashes, hits, hits + n, now)
        self.loop.schedule(landed, PRIO_CLUSTER, self._cpu_load_done, req)  # lands before steps at that time
        return 1

    def _cpu_load_done(self, now: int, req: Request) -> None:
        """A load has landed: its blocks join the GPU prefix cache (evictable, most recent first) and the
        request goes back to the front of the queue, where its next admission finds them computed (or,
        cancelled meanwhile, leaves: the blocks stay cached)."""
        del self.loading[req.request_id]
        seq = req.seq
        hashes = req.block_hashes
        lo = len(seq.shared_blocks)
        hi = lo + seq.private_blocks
        self.cpu.finish_load(hashes, lo, hi)
        seq.private_blocks -= self.kv.register(hashes[lo:hi], seq.shared_blocks)  # a duplicate stays private
        self.kv.release(seq.shared_blocks, seq.private_blocks)
        if req.request_id in self.abort_loads:
            self.abort_loads.discard(req.request_id)
            seq.clear(DONE)
            self._departed(req, now, ABORTED)
            self._publish()
            if not self.busy and self.waiting:
                self._wake(now)
            return
        seq.clear(WAITING)
        self.waiting.appendleft(req)
        self.waiting_tokens += req.prompt_tokens + req.generated
        self._publish()
        if not self.busy:
            self._wake(now)
        else:
            self._cut_run(now)

    # ------------------------------------------------------------------ cancellation (hedging)
    def cancel(self, req: Request, now: int) -> None:
        """Stop serving ``req`` (a hedge's losing copy), as vLLM aborts a request between engine steps: at
        once if it waits in the queue, when its load lands if it loads from the CPU tier, else at the end
        of the step in flight (whose work for it is spent; a run is cut there). Its departure (ABORTED) is
        told once it is gone and its blocks are free. A request already finished here is left alone."""
        seq = req.seq
        if seq.phase == DONE or req in self.aborts:
            return
        if req.request_id in self.loading:
            self.abort_loads.add(req.request_id)
        elif seq.phase == WAITING:
            self.waiting.remove(req)
            self.waiting_tokens -= req.prompt_tokens + req.generated
            seq.phase = DONE
            self._publish_queue()
            self._departed(req, now, ABORTED)
        else:
            self.aborts.append(req)
            plan = self.plan
            if plan.ends_us is not None and plan.cut(now):
                self.version = version = self.version + 1
                self.loop.schedule(plan.end_us, self.priority, self._event, version)

    def _apply_aborts(self, now: int) -> None:
        """At a step boundary: the cancelled running requests leave, freeing their blocks (as a
        preemption does, without going back to the queue)."""
        aborts, self.aborts = self.aborts, []
        for req in aborts:
            if req.seq.phase != DONE:  # else it finished in the step that just ended (the cluster heard of it)
                self._leave_running(req, now, DONE)
                self._departed(req, now, ABORTED)

    def work_done(self, req: Request) -> tuple[int, int]:
        """The prompt tokens computed here for ``req`` (recomputes included) and the tokens it generated."""
        seq = req.seq
        return (seq.prefilled if seq is not None else 0), req.generated

    def run_blocks_by(self, now: int) -> int:
        """Blocks the fast-forwarded run has taken by ``now`` beyond its first step (for live signals)."""
        started = self.plan.steps_started_after_first(now)
        return self.decoders.block_need(self.plan.start + 1, started) if started > 0 else 0

    def run_blocks_at(self, now: int) -> tuple[int, int]:
        """``run_blocks_by(now)`` and the last instant it holds (the end of the step running at ``now``:
        the next step takes its blocks when that one ends). A cut only shortens the run, so a value
        stays right until the run is applied."""
        plan = self.plan
        started = plan.steps_started_after_first(now)
        if started >= plan.steps - 1:
            return self.run_blocks_by(now), plan.end_us  # every step has started: fixed until applied
        return self.run_blocks_by(now), plan.ends_us[started]

    # ------------------------------------------------------------------ end of simulation
    def settle(self, horizon: int) -> None:
        """At the horizon: apply the steps of a fast-forwarded run that ended by then."""
        plan = self.plan
        if plan.ends_us is not None and plan.steps and plan.keep_ended_by(horizon):
            self._apply_plan(plan.end_us)

    def in_flight(self) -> list[Request]:
        """Requests still queued or running (unfinished at the end)."""
        return list(self.running.values()) + list(self.waiting) + list(self.landed)

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Raise SimulationError when a conservation law or limit of docs/invariants.md is broken (the
        tests call it after every event)."""
        kv = self.kv
        holders, private, decoders = self._count_holdings()
        if decoders != self.decoders.count:
            raise SimulationError(
                f"INV-7: instance {self.index}: {decoders} running requests decode, the decode set counts"
                f" {self.decoders.count}"
            )
        referenced = sum(kv.refcount.values())
        if holders != referenced:
            raise SimulationError(
                f"INV-3: instance {self.index}: {holders} block references held, cache counts {referenced}"
            )
        total = kv.available() + len(kv.refcount) + private
        if total != kv.total:
            raise SimulationError(
                f"INV-2: instance {self.index}: blocks not conserved: free {kv.free} + evictable {len(kv.evictable)}"
                f" + cached {len(kv.refcount)} + private {private} = {total} != {kv.total}"
            )
        if len(self.running) > self.max_seqs:
            raise SimulationError(f"INV-6: instance {self.index}: {len(self.running)} running > max_num_seqs")
        if kv.free < 0:
            raise SimulationError(f"INV-2: instance {self.index}: negative free blocks")
        if self.cpu is not None:
            loading_blocks = sum(req.seq.private_blocks for req in self.loading.values())
            self.cpu.check(f"instance {self.index}", loading_blocks)
        if self.batcher is not None:
            self.batcher.check()

    def _count_holdings(self) -> tuple[int, int, int]:
        """Cache references and private blocks held by requests here (running, P/D held, reserved, landed,
        loading from the CPU tier), and the running requests that decode."""
        holders = private = decoders = 0
        for shared, held_private in self.held.values():
            holders += len(shared)
            private += held_private
        for req in self.reserved.values():
            private += req.seq.private_blocks
        for req in self.landed:  # P/D: its KV has arrived and waits for a sequence slot
            private += req.seq.private_blocks
        for req in self.loading.values():  # its GPU hits, and the blocks its CPU load fills
            holders += len(req.seq.shared_blocks)
            private += req.seq.private_blocks
        # a decoder's next step has its blocks once it is planned
        planned = self.step_index if self.plan.steps else self.step_index - 1
        for req in self.running.values():
            seq = req.seq
            holders += len(seq.shared_blocks)
            if seq.phase == DECODE:
                decoders += 1
                private += self.decoders.private_blocks(req, planned)
            elif seq.phase == PREFILL:
                private += seq.private_blocks
            else:
                raise SimulationError(f"INV-7: request {req.request_id} running in phase {seq.phase.name}")
        return holders, private, decoders
