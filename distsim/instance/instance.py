"""One serving instance: a vLLM V1-style step scheduler over a block KV cache.

Each step has a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs). Running
requests are served first, in admission order: a decoding request takes one token, a prefilling one
its next chunk. Waiting requests are then admitted in queue order while the budget, the cap and the KV
blocks allow; the first that does not fit stops admission (no skipping). When the blocks for the
running requests run out, the newest running request is preempted by recompute: its blocks are freed
and it goes back to the front of the waiting queue; a step that preempted admits nobody. A request's
first token comes out of the step that finishes its prefill; each later token takes one step.

Speed: per-step work does not grow with the batch. Decoding requests are never touched one by one:
the instance keeps their count, the sum of their context lengths (as ``base + count * step``), the
number of them at each block-boundary phase (so the blocks a step needs are one array lookup), and a
heap of the step at which each will finish. Between a join and a finish, the free blocks permitting,
a run of decode-only steps is planned in one go: durations from the latency model's vectorised form,
block needs by phase, one event at the end. An arrival that could join cuts the run at the next step
boundary. Fast-forwarding gives exactly the results of stepping one by one (tests compare both).

Decoding request bookkeeping, with ``c`` the number of steps the instance has completed:
    generated       = decode_offset + c
    step s attends  = prompt + decode_offset + s tokens (its KV slots after allocating for step s)
    needs a block   at step s iff (prompt + decode_offset + s - 1) % block_size == 0
    finishes        at the end of step  output_tokens - 1 - decode_offset
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from distsim.engine.loop import PRIO_INSTANCE, EventLoop
from distsim.errors import SimulationError
from distsim.instance.kv_cache import KVCache
from distsim.instance.latency.base import LatencyModel, StepShape
from distsim.instance.queues import QUEUES
from distsim.request import Request, Status

WAITING, PREFILL, DECODE, DONE, HANDED_OFF = 0, 1, 2, 3, 4


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


class InstanceStats:
    """Counters an instance keeps for instances.parquet and the summary."""

    __slots__ = (
        "busy_us",
        "steps",
        "prefill_tokens",
        "decode_tokens",
        "peak_used_blocks",
        "preemptions",
        "completed",
        "handed_off",
        "dropped",
        "too_long",
        "admitted",
        "cached_tokens",
        "prompt_tokens",
        "itl_step_durations",
        "itl_step_weights",
        "itl_run_durations",
        "itl_run_counts",
        "itl_run_weights",
        "itl_single",
    )

    def __init__(self):
        self.busy_us = 0
        self.steps = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.peak_used_blocks = 0
        self.preemptions = 0
        self.completed = 0  # requests that finished here (their last token)
        self.handed_off = 0  # P/D prefill side: prompts computed here and passed to a decode instance
        self.dropped = 0
        self.too_long = 0  # rejected on arrival: prompt + output over max_model_len
        self.admitted = 0
        self.cached_tokens = 0
        self.prompt_tokens = 0
        # Inter-token latency samples, kept weighted: a step of duration d in which b requests decode
        # gives b gaps of d. Runs of steps keep their duration arrays; gaps after a preemption are single.
        self.itl_step_durations: list[int] = []
        self.itl_step_weights: list[int] = []
        self.itl_run_durations = array("q")  # the steps of all runs, back to back
        self.itl_run_counts: list[int] = []  # steps per run
        self.itl_run_weights: list[int] = []  # decoding requests per run
        self.itl_single: list[int] = []


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Instance:
    """A vLLM-like engine replica driven by the shared event loop."""

    def __init__(
        self,
        index: int,
        params: EngineParams,
        latency: LatencyModel,
        loop: EventLoop,
        on_done: Callable[[Request], None],
        *,
        fast_forward: bool = True,
        pool: str = "default",
        role: str = "mixed",
        hardware: str = "",
        gpus: int = 1,
    ):
        self.index = index
        self.params = params
        self.latency = latency
        self.loop = loop
        self.on_done = on_done
        self.fast_forward = fast_forward
        self.pool = pool
        self.role = role
        self.hardware = hardware
        self.gpus = gpus
        self.priority = PRIO_INSTANCE + index
        self.bs = params.block_size
        self.max_tokens = params.max_num_batched_tokens
        self.max_seqs = params.max_num_seqs
        self.caching = params.enable_prefix_caching
        self.chunked = params.enable_chunked_prefill
        self.reserve_full = params.scheduler_reserve_full_isl
        self.kv = KVCache(params.total_kv_blocks)
        self.waiting = QUEUES[params.scheduler]()
        self.running: dict[int, Request] = {}  # admission order
        self.prefilling: list[Request] = []  # running requests still in prefill, admission order
        # decoding aggregates
        self.step_index = 0
        self.dec_count = 0
        self.dec_ctx_base = 0  # sum over decoders of prompt + decode_offset
        self.phase_counts = [0] * self.bs  # decoders by (prompt + decode_offset) % block_size
        self.finish_heap: list[tuple[int, int, int, Request]] = []
        # the plan in flight: steps [plan_c0, plan_c0 + plan_steps) ending at plan_end
        self.busy = False
        self.version = 0
        self.plan_steps = 0
        self.plan_start = 0
        self.plan_begin = 0
        self.plan_end = 0
        self.plan_dur = 0
        self.plan_decoders = 0
        self.plan_chunks: list[tuple[Request, int]] = []
        self.plan_durations: list[int] | None = None  # a fast-forwarded run of decode steps
        self.plan_ends: list[int] | None = None
        self.stats = InstanceStats()
        self.board = None  # the cluster's SignalBoard: this instance pushes its state there
        self.in_run = False  # a fast-forwarded decode run is in flight
        self.waiting_tokens = 0  # tokens the waiting requests still have to prefill (a signal)
        self.on_prefilled: Callable[[Request, int], None] | None = None  # P/D: a prefill finished here
        self.held: dict[int, tuple[list, int]] = {}  # P/D prefill side: blocks held until the KV is sent
        # P/D decode side, in the order a request passes through: waiting for blocks for its KV, blocks
        # reserved while the KV moves, then landed (holding its blocks) waiting for a sequence slot
        self.awaiting_blocks: deque[Request] = deque()
        self.reserved: dict[int, Request] = {}
        self.landed: deque[Request] = deque()
        self.on_reserved: Callable[[Request, int], None] | None = None  # P/D: blocks ready, send the KV

    def attach(self, board) -> None:
        """Push state changes to ``board`` from now on (only when a policy reads signals live)."""
        self.board = board
        self.publish_to(board)

    def publish_to(self, board) -> None:
        i = self.index
        board.waiting[i] = len(self.waiting) + len(self.landed)
        board.running[i] = len(self.running)
        board.kv_used[i] = self.kv.used()
        if self.in_run and board is not self.board:  # a pull: add what the run has taken by now
            board.kv_used[i] += self.run_blocks_by(self.loop.now)
        board.queued_tokens[i] = self.waiting_tokens
        board.cached_tokens[i] = self.stats.cached_tokens
        board.prompt_tokens[i] = self.stats.prompt_tokens

    def _publish(self) -> None:
        if self.board is not None:
            self.publish_to(self.board)

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, req: Request, now: int) -> None:
        """A request arrives at this instance's waiting queue."""
        req.instance = self.index
        req.enqueue_us = now
        limit = self.params.max_model_len
        if limit is not None and req.prompt_tokens + req.output_tokens > limit:
            # vLLM's front end refuses a request whose prompt plus max_tokens exceeds max_model_len
            req.status = Status.REJECTED
            req.phase = DONE
            self.stats.too_long += 1
            self.on_done(req)
            return
        if not self.can_ever_fit(req):
            req.status = Status.DROPPED
            req.phase = DONE
            self.stats.dropped += 1
            self.on_done(req)
            return
        self._enqueue(req, now)

    def can_ever_fit(self, req: Request) -> bool:
        """Whether the request, alone on this instance, could ever run to the end."""
        tokens = req.prompt_tokens if self.role == "prefill" else req.prompt_tokens + req.output_tokens - 1
        if _ceil_div(tokens, self.bs) > self.params.total_kv_blocks:
            return False
        return self.chunked or req.prompt_tokens <= self.max_tokens

    def _enqueue(self, req: Request, now: int) -> None:
        req.phase = WAITING
        self.waiting.append(req)
        self.waiting_tokens += req.prompt_tokens + req.generated
        if self.board is not None:
            self.board.waiting[self.index] = len(self.waiting) + len(self.landed)
            self.board.queued_tokens[self.index] = self.waiting_tokens
        if not self.busy:
            self._wake(now)
        elif self.plan_durations is not None and self.waiting.peek() is req and len(self.running) < self.max_seqs:
            self._cut_run(now)

    def _wake(self, now: int) -> None:
        """An idle instance plans a step at ``now`` (something arrived, or blocks came free)."""
        self.busy = True
        self.plan_steps = 0
        self.version += 1
        self.loop.schedule(now, self.priority, self._on_event, self.version)

    def _run_ends(self) -> list[int]:
        """End times of the steps of the planned run (computed only when a run is cut)."""
        if self.plan_ends is None:
            ends = list(accumulate(self.plan_durations, initial=self.plan_begin))
            del ends[0]
            self.plan_ends = ends
        return self.plan_ends

    def _cut_run(self, now: int) -> None:
        """End the fast-forwarded run at the first step boundary at or after ``now``."""
        ends = self._run_ends()
        idx = bisect_left(ends, now)
        if idx < self.plan_steps - 1:
            self.plan_steps = idx + 1
            self.plan_end = ends[idx]
            self.version += 1
            self.loop.schedule(self.plan_end, self.priority, self._on_event, self.version)

    # ------------------------------------------------------------------ the step cycle
    def _on_event(self, now: int, version: int) -> None:
        if version != self.version:
            return  # a run that was cut short
        if self.plan_steps:
            self._apply_plan(now)
        self._plan_next(now)
        self._publish()

    def _apply_plan(self, now: int) -> None:
        """Everything that happens at the end of the planned step(s)."""
        stats = self.stats
        k = self.plan_steps
        c0 = self.plan_start
        b = self.plan_decoders
        last = c0 + k - 1
        self.step_index = c0 + k
        stats.steps += k
        stats.busy_us += now - self.plan_begin
        if self.plan_durations is not None:
            durations = self.plan_durations
            if k > 1:  # a run's first step took its blocks when planned; the rest take theirs now
                self.kv.allocate(self._decode_block_need(c0 + 1, k - 1))
            if self.board is not None:
                self.board.in_run.pop(self.index, None)
            self.in_run = False
            if b:
                stats.itl_run_durations.extend(durations[:k] if k < len(durations) else durations)
                stats.itl_run_counts.append(k)
                stats.itl_run_weights.append(b)
            self.plan_durations = None
            self.plan_ends = None
        else:
            if b:
                stats.itl_step_durations.append(self.plan_dur)
                stats.itl_step_weights.append(b)
        stats.decode_tokens += b * k
        used = self.kv.used()
        if used > stats.peak_used_blocks:
            stats.peak_used_blocks = used
        self.plan_steps = 0

        if self.plan_chunks:
            self._apply_prefill_chunks(now)
        heap = self.finish_heap
        while heap and heap[0][0] <= last:
            _, _, epoch, req = heapq.heappop(heap)
            if req.decode_epoch != epoch:
                continue  # preempted since it was pushed
            self._leave_decode(req)
            req.generated = req.output_tokens
            alloc = req.prompt_tokens + req.decode_offset + last
            self._finish(req, now, _ceil_div(alloc, self.bs) - len(req.shared_blocks))

    def _apply_prefill_chunks(self, now: int) -> None:
        bs = self.bs
        kv = self.kv
        stats = self.stats
        any_done = False
        for req, n in self.plan_chunks:
            req.computed += n
            stats.prefill_tokens += n
            hashes = req.block_hashes
            if self.caching and hashes is not None:
                full = min(req.computed // bs, len(hashes))
                if full > req.hashed_blocks:  # newly full prompt blocks join the prefix cache
                    req.private_blocks -= kv.register(hashes[req.hashed_blocks : full], req.shared_blocks)
                    req.hashed_blocks = full
            if req.computed < req.prompt_tokens + req.generated:
                continue  # more chunks to go
            any_done = True
            req.generated += 1
            if req.first_token_us < 0:
                req.first_token_us = now
            else:
                stats.itl_single.append(now - req.last_token_us)  # first token after a recompute
            req.last_token_us = now
            if self.role == "prefill":
                self._hand_off(req, now)
            elif req.generated >= req.output_tokens:
                req.phase = DONE
                self._finish(req, now, req.private_blocks)
            else:
                self._join_decode(req)
        self.plan_chunks = []
        if any_done:
            self.prefilling = [r for r in self.prefilling if r.phase == PREFILL]

    def _join_decode(self, req: Request) -> None:
        c = self.step_index
        req.phase = DECODE
        req.decode_offset = req.generated - c
        r = req.prompt_tokens + req.decode_offset
        self.dec_count += 1
        self.dec_ctx_base += r
        self.phase_counts[r % self.bs] += 1
        req.decode_epoch += 1
        heapq.heappush(self.finish_heap, (req.output_tokens - 1 - req.decode_offset, req.request_id, req.decode_epoch, req))

    def _leave_decode(self, req: Request) -> None:
        r = req.prompt_tokens + req.decode_offset
        self.dec_count -= 1
        self.dec_ctx_base -= r
        self.phase_counts[r % self.bs] -= 1
        req.decode_epoch += 1

    def _finish(self, req: Request, now: int, private: int) -> None:
        self.kv.release(req.shared_blocks, private)
        req.shared_blocks = []
        req.private_blocks = 0
        req.phase = DONE
        req.completion_us = now
        req.last_token_us = now
        req.status = Status.COMPLETED
        del self.running[req.request_id]
        self.stats.completed += 1
        self.on_done(req)

    def _decode_block_need(self, c0: int, k: int) -> int:
        """Blocks the decoders need over steps c0 .. c0+k-1 (one per decoder per block boundary)."""
        bs = self.bs
        counts = self.phase_counts
        full, rem = divmod(k, bs)
        need = full * self.dec_count
        for j in range(rem):
            need += counts[(1 - c0 - j) % bs]
        return need

    def _plan_next(self, now: int) -> None:
        """Schedule the next step (or a run of decode steps) starting at ``now``, or go idle."""
        c = self.step_index
        bs = self.bs
        kv = self.kv
        budget = self.max_tokens - self.dec_count
        need_dec = self.phase_counts[(1 - c) % bs] if self.dec_count else 0
        chunks: list[tuple[Request, int]] = []
        need = need_dec
        for req in self.prefilling:
            if budget <= 0:
                break
            n = min(req.prompt_tokens + req.generated - req.computed, budget)
            chunks.append((req, n))
            need += _ceil_div(req.alloc_tokens + n, bs) - _ceil_div(req.alloc_tokens, bs)
            budget -= n
        preempted = False
        if need > kv.free + len(kv.evictable):
            chunks, budget = self._schedule_running_with_preemption(now)
            preempted = True
            need_dec = 0  # allocated one by one above
        else:
            for req, n in chunks:
                nb = _ceil_div(req.alloc_tokens + n, bs) - _ceil_div(req.alloc_tokens, bs)
                kv.allocate(nb)
                req.alloc_tokens += n
                req.private_blocks += nb
        # a step that preempted admits nobody (vLLM), unless it was left with nothing to run
        if (not preempted or not (chunks or self.dec_count)) and budget > 0 and len(self.running) < self.max_seqs:
            if self.landed:
                budget = self._admit_landed(budget)
            if self.waiting:
                budget = self._admit_waiting(now, budget, need_dec, chunks)
            if self.awaiting_blocks and not self.waiting and budget > 0 and len(self.running) < self.max_seqs:
                self._reserve_incoming(now, need_dec)

        b = self.dec_count
        if not chunks and not b:
            self.busy = False
            self.plan_steps = 0
            if (self.waiting or self.landed or self.awaiting_blocks) and not (self.held or self.reserved):
                # nothing runs and nothing in flight will free blocks or land: a deadlock (a bug)
                raise SimulationError(
                    f"instance {self.index}: idle with {len(self.waiting)} waiting, {len(self.landed)} landed and"
                    f" {len(self.awaiting_blocks)} incoming requests"
                )
            return

        self.plan_start = c
        self.plan_begin = now
        self.plan_decoders = b
        self.plan_chunks = chunks
        if not chunks and self.fast_forward and not preempted:
            run = self._decode_run_length(c)
            if run > 1:
                # the first step's blocks are taken now, as a single step's would be; the rest as the
                # run is applied (nothing else touches this cache meanwhile)
                if need_dec:
                    kv.allocate(need_dec)
                if self.board is not None:
                    self.board.in_run[self.index] = self
                self.in_run = True
                durations = self.latency.decode_steps(b, self.dec_ctx_base + b * c, run)
                self.plan_steps = run
                self.plan_durations = durations
                self.plan_ends = None
                self.plan_end = now + sum(durations)
                self.version += 1
                self.loop.schedule(self.plan_end, self.priority, self._on_event, self.version)
                return
        # a single step
        if need_dec:
            kv.allocate(need_dec)
        pf_tokens = pf_pairs = pf_kv = 0
        for req, n in chunks:
            c0 = req.computed
            pf_tokens += n
            pf_pairs += n * c0 + n * (n + 1) // 2
            pf_kv += c0 + n
        dur = self.latency.step_us(StepShape(pf_tokens, pf_pairs, pf_kv, b, self.dec_ctx_base + b * c))
        self.plan_dur = dur
        self.plan_steps = 1
        self.plan_end = now + dur
        self.version += 1
        self.loop.schedule(self.plan_end, self.priority, self._on_event, self.version)

    def _decode_run_length(self, c: int) -> int:
        """How many decode-only steps can run from step c before anyone joins, finishes or runs out of
        blocks: up to and including the earliest finish, as far as the available blocks reach."""
        heap = self.finish_heap
        while heap and heap[0][3].decode_epoch != heap[0][2]:
            heapq.heappop(heap)
        run = heap[0][0] - c + 1
        if run <= 1:
            return run
        avail = self.kv.free + len(self.kv.evictable)
        bs = self.bs
        # cheap bound first: each decoder needs at most ceil(run / bs) blocks over the run
        if self.dec_count * _ceil_div(run, bs) <= avail:
            return run
        steps = np.arange(c, c + run, dtype=np.int64)
        need = np.asarray(self.phase_counts, dtype=np.int64)[(1 - steps) % bs]
        cum = np.cumsum(need)
        return int(np.searchsorted(cum, avail, side="right"))

    def _schedule_running_with_preemption(self, now: int) -> tuple[list[tuple[Request, int]], int]:
        """vLLM's running loop when blocks run short: allocate in admission order, preempting the newest
        running request until the current one fits (or is itself preempted)."""
        c = self.step_index
        bs = self.bs
        kv = self.kv
        order = list(self.running.values())
        budget = self.max_tokens
        chunks: list[tuple[Request, int]] = []
        i = 0
        while i < len(order):
            req = order[i]
            if req.phase == DECODE:
                n = 1
                nb = 1 if (req.prompt_tokens + req.decode_offset + c - 1) % bs == 0 else 0
            else:
                if budget <= 0:
                    i += 1
                    continue
                n = min(req.prompt_tokens + req.generated - req.computed, budget)
                nb = _ceil_div(req.alloc_tokens + n, bs) - _ceil_div(req.alloc_tokens, bs)
            scheduled = True
            while nb > kv.free + len(kv.evictable):
                victim = order.pop()
                self._preempt(victim, now)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            kv.allocate(nb)
            if req.phase == PREFILL:
                req.alloc_tokens += n
                req.private_blocks += nb
                chunks.append((req, n))
            budget -= n
            i += 1
        return chunks, budget

    def _preempt(self, req: Request, now: int) -> None:
        """Preempt by recompute: free everything, back to the front of the waiting queue."""
        c = self.step_index
        if req.phase == DECODE:
            self._leave_decode(req)
            req.generated = req.decode_offset + c
            private = _ceil_div(req.prompt_tokens + req.decode_offset + c - 1, self.bs) - len(req.shared_blocks)
            req.last_token_us = now
        else:
            private = req.private_blocks
            self.prefilling.remove(req)
        self.kv.release(req.shared_blocks, private)
        req.shared_blocks = []
        req.private_blocks = 0
        req.alloc_tokens = 0
        req.computed = 0
        req.hashed_blocks = 0
        req.phase = WAITING
        req.preemptions += 1
        self.stats.preemptions += 1
        del self.running[req.request_id]
        self.waiting.appendleft(req)
        self.waiting_tokens += req.prompt_tokens + req.generated

    def _admit_waiting(self, now: int, budget: int, need_dec: int, chunks: list) -> int:
        """Admit waiting requests in queue order while budget, sequence cap and blocks allow."""
        bs = self.bs
        kv = self.kv
        waiting = self.waiting
        running = self.running
        stats = self.stats
        while waiting and budget > 0 and len(running) < self.max_seqs:
            req = waiting.peek()
            total = req.prompt_tokens + req.generated
            hits = from_evictable = 0
            hashes = req.block_hashes
            if self.caching and hashes is not None:
                hits, from_evictable = kv.match_prefix(hashes, (total - 1) // bs)
            computed = hits * bs
            n = total - computed
            if n > budget:
                if not self.chunked and req.generated == 0:
                    break  # without chunked prefill a prompt goes in whole (recomputes are chunked)
                n = budget
            nb = _ceil_div(computed + n, bs) - hits
            # vLLM's scheduler_reserve_full_isl: the blocks for the whole sequence so far must be free,
            # not only those of this step's chunk (else a long prompt is admitted and preempts others)
            need = _ceil_div(total, bs) - hits if self.reserve_full else nb
            if need > kv.free + len(kv.evictable) - from_evictable - need_dec:
                break
            waiting.popleft()
            self.waiting_tokens -= total
            if hits:
                shared = list(hashes[:hits])
                kv.reference(shared)
                req.shared_blocks = shared
            kv.allocate(nb)
            req.computed = computed
            req.alloc_tokens = computed + n
            req.private_blocks = nb
            req.hashed_blocks = hits
            req.phase = PREFILL
            if req.first_scheduled_us < 0:
                req.first_scheduled_us = now
                req.cached_tokens = computed
                stats.admitted += 1
                stats.cached_tokens += computed
                stats.prompt_tokens += req.prompt_tokens
            running[req.request_id] = req
            self.prefilling.append(req)
            chunks.append((req, n))
            budget -= n
        return budget

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
        req.phase = HANDED_OFF
        del self.running[req.request_id]
        self.held[req.request_id] = (req.shared_blocks, req.private_blocks)
        req.shared_blocks = []
        req.private_blocks = 0
        req.alloc_tokens = 0
        req.computed = 0
        req.hashed_blocks = 0
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

    def incoming(self, req: Request, now: int) -> None:
        """Decode side: a prefilled request wants blocks for its KV; served at the next step boundary."""
        req.instance = self.index
        self.awaiting_blocks.append(req)
        if not self.busy:
            self._wake(now)
        elif self.plan_durations is not None and len(self.running) < self.max_seqs:
            self._cut_run(now)

    def _reserve_incoming(self, now: int, need_dec: int) -> None:
        """Reserve blocks for incoming KVs in arrival order, leaving this step's decode blocks."""
        kv = self.kv
        bs = self.bs
        while self.awaiting_blocks:
            req = self.awaiting_blocks[0]
            need = _ceil_div(req.prompt_tokens + 1, bs)  # the prompt's KV and the first decode token's slot
            if need > kv.free + len(kv.evictable) - need_dec:
                return
            self.awaiting_blocks.popleft()
            kv.allocate(need)
            req.private_blocks = need
            req.alloc_tokens = req.prompt_tokens + 1
            req.computed = req.prompt_tokens
            self.reserved[req.request_id] = req
            self.on_reserved(req, now)

    def receive(self, req: Request, now: int) -> None:
        """Decode side: the KV has landed; the request waits for a sequence slot to decode."""
        del self.reserved[req.request_id]
        req.phase = WAITING
        self.landed.append(req)
        self.waiting_tokens += 1  # its next decode token
        if self.board is not None:
            self.board.waiting[self.index] = len(self.waiting) + len(self.landed)
            self.board.queued_tokens[self.index] = self.waiting_tokens
        if not self.busy:
            self._wake(now)
        elif self.plan_durations is not None and len(self.running) < self.max_seqs:
            self._cut_run(now)

    def _admit_landed(self, budget: int) -> int:
        """Decode side: landed requests join the decoders while sequence slots and budget last."""
        running = self.running
        while self.landed and budget > 0 and len(running) < self.max_seqs:
            req = self.landed.popleft()
            self.waiting_tokens -= 1
            running[req.request_id] = req
            self.stats.admitted += 1
            self._join_decode(req)  # it decodes in this step: generated = 1 = offset + steps done
            budget -= 1
        return budget

    def run_blocks_by(self, now: int) -> int:
        """Blocks the fast-forwarded run has taken by ``now`` beyond its first step (for live signals:
        a step takes its blocks when it starts, and a read at a step's start time comes first)."""
        if self.plan_durations is None or self.plan_steps <= 1:
            return 0
        started = min(bisect_left(self._run_ends(), now), self.plan_steps - 1)
        return self._decode_block_need(self.plan_start + 1, started) if started > 0 else 0

    # ------------------------------------------------------------------ end of simulation
    def settle(self, horizon: int) -> None:
        """At the horizon: apply the steps of a fast-forwarded run that ended by then."""
        if self.plan_durations is None or not self.plan_steps:
            return
        ends = self._run_ends()
        k = bisect_right(ends, horizon)
        if k == 0:
            return
        self.plan_steps = min(k, self.plan_steps)
        self.plan_end = ends[self.plan_steps - 1]
        self._apply_plan(self.plan_end)

    def in_flight(self) -> list[Request]:
        """Requests still queued or running (unfinished at the end)."""
        return list(self.running.values()) + list(self.waiting) + list(self.landed)

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Raise SimulationError when a conservation law or limit is broken (used by the tests)."""
        kv = self.kv
        c = self.step_index
        private = 0
        referenced = sum(kv.refcount.values())
        holders = 0
        for shared, held_private in self.held.values():
            holders += len(shared)
            private += held_private
        for req in self.reserved.values():
            private += req.private_blocks
        for req in self.landed:  # P/D: its KV has arrived and waits for a sequence slot
            private += req.private_blocks
        for req in self.running.values():
            holders += len(req.shared_blocks)
            if req.phase == DECODE:
                alloc = req.prompt_tokens + req.decode_offset + c - 1
                if self.plan_steps:
                    alloc += 1  # the next step's blocks are allocated when it is planned
                private += _ceil_div(alloc, self.bs) - len(req.shared_blocks)
            elif req.phase == PREFILL:
                private += req.private_blocks
            else:
                raise SimulationError(f"request {req.request_id} in running with phase {req.phase}")
        if holders != referenced:
            raise SimulationError(f"instance {self.index}: {holders} block references held, cache counts {referenced}")
        total = kv.free + len(kv.evictable) + len(kv.refcount) + private
        if total != kv.total:
            raise SimulationError(
                f"instance {self.index}: blocks not conserved: free {kv.free} + evictable {len(kv.evictable)}"
                f" + cached {len(kv.refcount)} + private {private} = {total} != {kv.total}"
            )
        if len(self.running) > self.max_seqs:
            raise SimulationError(f"instance {self.index}: {len(self.running)} running > max_num_seqs")
        if kv.free < 0:
            raise SimulationError(f"instance {self.index}: negative free blocks")
