"""The step scheduler of an instance: what the next step runs, after vLLM V1's scheduler.

Each step has a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs). Running
requests are served first, in admission order: a decoding request takes one token, a prefilling one
its next chunk. Waiting requests are then admitted in queue order while the budget, the cap and the KV
blocks allow; the first that does not fit stops admission (no skipping). When the blocks for the
running requests run out, the newest running request is preempted by recompute: its blocks are freed
and it goes back to the front of the waiting queue; a step that preempted admits nobody. Under P/D a
decode engine admits landed requests first, then reserves blocks for incoming KVs
(distsim.instance.handoff); a queueing discipline (distsim.instance.batching) may let only part of the
waiting queue in; a CPU KV tier may take a request out of the queue to load its blocks
(distsim.instance.cpu_loads).

Async scheduling (``cluster.engine.async_scheduling``, vLLM's ``--async-scheduling``). vLLM schedules step
N+1 when step N begins, while it runs, so what step N+1 admits is what the queue held when step N began.
Modelled: each request notes when it joined the waiting queue (``SeqState.enqueued_us``); the step event
notes when the step that just ended began (a fast-forwarded run's last step: ``StepPlan.last_begin_us``),
and admission does not see a request enqueued after that (``visible_us``): FCFS stops at it (everyone
behind came later), an ordered queue (priority, shortest_prompt) sets it aside for this admission and takes
the best request already visible. A request reaching a busy engine mid-step is thus first computed in the
step after the next. If the new step would run nothing else, the engine schedules at once, as an idle one
does: every waiting request is visible. A step whose admission met a late request is planned alone, not
as a fast-forwarded run, so the late request joins at the next boundary exactly as stepping one by one; a
request reaching the queue's head during a run cuts it one boundary later than without async scheduling
(``StepPlan.cut``'s lag: the first boundary whose step can see it; the same results, one event fewer).
Preempted requests and those back from a CPU tier load keep their first enqueue time: they were seen
before, never late. A windowed batch (distsim.instance.batching) becomes visible when it closes.
Simplified: P/D requests landing on a decode engine join at the next boundary (in vLLM a finished KV
receive is also noticed one step late); the scheduler's own decisions (running requests, preemption,
blocks) use the state at the boundary, not the state one step earlier; the step's time is unchanged (vLLM
hides the host's scheduling behind the GPU step: the fitted host terms carry what remains).

:class:`Scheduler` is the base class of :class:`~distsim.instance.instance.Instance` and reads and writes
the instance's state (declared there): one object, so the hot path pays no indirection for the split.
The instance's own module has the step cycle around it (the event, applying a finished step, arrivals).
"""

from __future__ import annotations

from distsim.errors import SimulationError
from distsim.instance.decode_set import ceil_div
from distsim.instance.phase import Phase
from distsim.instance.sequence import SeqState
from distsim.request import Request

# module globals for the hot path: reading Phase.X goes through the enum's metaclass (~0.2 us a time)
WAITING, PREFILL, DECODE, DONE, HANDED_OFF = Phase



def prefill_shape(chunks: list[tuple[Request, int]]) -> tuple[int, int, int]:
    """A step's prefill chunks as the step model prices them: their tokens, the (query, key) pairs their
    attention computes (each token sees its sequence's computed context and the chunk up to itself) and the
    KV tokens read."""
    tokens = pairs = kv = 0
    for req, n in chunks:
        c0 = req.seq.computed
        tokens += n
        pairs += n * c0 + n * (n + 1) // 2
        kv += c0 + n
    return tokens, pairs, kv

class Scheduler:
    """The scheduling half of an :class:`~distsim.instance.instance.Instance`: plan the next step (or a
    fast-forwarded run of decode steps), with preemption and admission."""

    __slots__ = ()  # the state is the Instance's (its slots)

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
        elif chunks or preempted or not self.fast_forward or self.late_waits or not self._plan_run(now, c, need_dec):
            self.late_waits = False  # a late request waits (async scheduling): it is visible after one step
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
            budget = self.handoff.admit_landed(budget)
        if self.waiting:
            budget = self._admit_queue(self.waiting, now, budget, need_dec, chunks)
        if self.awaiting_blocks and not self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            self.handoff.reserve(now, need_dec)

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
        pf_tokens, pf_pairs, pf_kv = prefill_shape(chunks)
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
                n, nb = self._decoder_claim(req, c)
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
                self._take_decoder(req, n, nb)
            budget -= n
            i += 1
        return chunks, budget

    def _decoder_claim(self, req: Request, c: int) -> tuple[int, int]:
        """A decoder's tokens in step ``c`` and the blocks they need (one token; a speculating engine,
        distsim.instance.speculative.engine, claims its drafts too)."""
        return 1, (1 if (req.prompt_tokens + req.seq.decode_offset + c - 1) % self.bs == 0 else 0)

    def _take_decoder(self, req: Request, n: int, nb: int) -> None:
        """Give a decoder the ``nb`` blocks of its ``n`` tokens (the caller made room)."""
        self.kv.allocate(nb)

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
        self.leave_running(req, now, WAITING)
        req.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(req)
        self.waiting_tokens += req.prompt_tokens + req.generated

    def leave_running(self, req: Request, now: int, phase: Phase) -> None:
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
        self.kv.release(seq.runs, private)
        seq.clear(phase)
        del self.running[req.request_id]

    def admit_waiting(  # long: vLLM's waiting loop in one place, the hot path of admission
        self, waiting, now: int, budget: int, need_dec: int, chunks: list[tuple[Request, int]]
    ) -> int:
        """Admit requests from ``waiting`` (the queue, or the part of it a queueing discipline lets in) in
        queue order while budget, sequence cap and blocks allow. With async scheduling a request enqueued
        after ``visible_us`` is not seen yet, unless the step would run nothing else."""
        bs = self.bs
        kv = self.kv
        cpu = self.cpu
        visible = self.visible_us
        hid = False
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            req = waiting.peek()
            if req.seq.enqueued_us > visible:  # async scheduling: it came after this step was scheduled
                if chunks or self.decoders.count:
                    self.late_waits = True
                    if not hasattr(waiting, "set_aside"):
                        break  # FCFS: every request behind it came later still
                    waiting.set_aside()  # an ordered queue: the best request already visible goes next
                    hid = True
                    continue
                visible = now  # nothing else would run: the engine schedules at once, as an idle one does
            total = req.prompt_tokens + req.generated
            hits = from_evictable = 0
            if self.caching and req.block_hashes is not None:
                hits, from_evictable = kv.match_prefix(req.block_hashes, (total - 1) // bs)
                if cpu is not None:
                    room = kv.available() - from_evictable - need_dec
                    loading = self.cpu_loads.start(waiting, req, now, total, hits, room)
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
        if hid:
            waiting.restore_aside()
        return budget

    def _start_prefill(self, req: Request, now: int, hits: int, n: int, nb: int) -> None:
        """A waiting request enters the running set: ``hits`` cached prompt blocks referenced, ``nb`` new
        blocks for its first chunk of ``n`` tokens."""
        seq = req.seq
        computed = hits * self.bs
        if hits:
            seq.runs = self.kv.reference(req.block_hashes, hits)
            seq.shared_blocks = hits
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
