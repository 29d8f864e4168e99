"""One serving instance: a vLLM V1-style engine over a block KV cache, driven by the shared event loop.

What each step runs is decided by the step scheduler (:class:`~distsim.instance.scheduler.Scheduler`, this
class's base: running requests first, then admission, preemption by recompute); this module holds the
engine's state, arrivals, and the step cycle around the scheduler: an event at each step boundary applies
the finished step (tokens out, prompts cached, finished requests released) and plans the next. A request's
first token comes out of the step that finishes its prefill; each later token takes one step.

Features are parts the instance builds when its settings ask for them (``_set_parts``), never patched on
later: the P/D side of its role (distsim.instance.handoff), CPU KV tier loads (distsim.instance.cpu_loads),
cancellation (distsim.instance.cancellation), windowed prefill batching (distsim.instance.batching).
Observers subscribe: ``departure_listeners`` (distsim.instance.departure), and the ``step_listeners`` of
the subclass a timeline picks (distsim.instance.observed).

Speed: per-step work does not grow with the batch. Decoding requests are never touched one by one:
they are aggregates in a :class:`~distsim.instance.decode_set.DecodeSet`. Between a join and a finish,
the free blocks permitting, a run of decode-only steps is planned in one go (a
:class:`~distsim.instance.plan.StepPlan`): the steps' end times from the latency model in one call,
block needs by phase, one event at the end. An arrival that could join cuts the run at the next step
boundary. Fast-forwarding gives exactly the results of stepping one by one (tests compare both).

The instance's bookkeeping for each request it serves is a :class:`~distsim.instance.sequence.SeqState`
on ``Request.seq``; the invariants it keeps are numbered in docs/invariants.md (checked by
distsim.instance.checks).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from distsim.events.loop import PRIO_INSTANCE, EventLoop
from distsim.instance.batching import PrefillBatcher, batching_on
from distsim.instance.cancellation import Cancellation
from distsim.instance.checks import check_instance
from distsim.instance.cpu_kv import CpuKvTier
from distsim.instance.cpu_loads import CpuLoads
from distsim.instance.decode_set import DecodeSet
from distsim.instance.departure import Departure, DepartureListener
from distsim.instance.handoff import DecodeSide, PrefillSide
from distsim.instance.kv_cache import KVCache
from distsim.instance.latency.base import LatencyModel
from distsim.instance.phase import Phase
from distsim.instance.plan import StepPlan
from distsim.instance.queues import QUEUES
from distsim.instance.scheduler import Scheduler
from distsim.instance.sequence import SeqState
from distsim.instance.stats import InstanceStats
from distsim.request import Request, Status

if TYPE_CHECKING:
    from distsim.instance.queues.output_prediction import OutputPrediction
    from distsim.instance.speculative.settings import SpeculativeSettings
    from distsim.instance.storage_kv.settings import StorageKvSettings

# module globals for the hot path: reading Phase.X goes through the enum's metaclass (~0.2 us a time)
WAITING, PREFILL, DECODE, DONE, HANDED_OFF = Phase
COMPLETED = Status.COMPLETED
FINISHED = Departure.FINISHED
ALWAYS_VISIBLE = 1 << 62  # async scheduling off: every waiting request is visible to the step being planned
NONE: Mapping = MappingProxyType({})  # the requests of a part the engine lacks (P/D, CPU tier): none, ever


@dataclass(frozen=True)
class EngineParams:
    """The resolved engine settings of one instance. No field has a default: the config schema
    (``cluster.engine``, distsim/config/schema.py) holds the one default of each setting."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    total_kv_blocks: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    scheduler_reserve_full_isl: bool
    async_scheduling: bool  # vLLM's --async-scheduling (distsim.instance.scheduler)
    scheduler: str
    max_model_len: int | None  # longest prompt + output accepted; None: no limit
    cpu_kv_blocks: int  # the CPU KV tier's blocks (distsim.instance.cpu_kv); 0: none
    prefill_batch_min: int | None  # windowed prefill batching (distsim.instance.batching); None: no min
    prefill_batch_window_us: int  # the batching window; 0: off (continuous batching)
    output_prediction_sigma: float  # predicted_output's log-space error (distsim.instance.queues.output_prediction)
    scheduler_aging_per_s: float = 0.0  # an ordered queue's aging (distsim.instance.queues.keyed); 0: none
    speculative: SpeculativeSettings | None = None  # speculative decoding (distsim.instance.speculative); None: off
    storage_kv: StorageKvSettings | None = None  # the storage tier below the CPU tier (distsim.instance.storage_kv)
    lora: Any = None  # LoRA adapters (distsim.lora.settings.LoraSettings, a layer above); None: off


class Instance(Scheduler):
    """A vLLM-like engine replica driven by the shared event loop: its state, its parts, arrivals and the
    step cycle; what each step runs is decided by its base class (distsim.instance.scheduler)."""

    # slots, not a dict: a fleet has up to a million engines, and with this many names a dict is not
    # shared between instances (about 1.6 KB each, where slots take 0.4)
    __slots__ = (
        # identity and place (__init__)
        "index", "slot", "latency", "loop", "departure_listeners", "fast_forward", "pool", "role", "hardware",
        "gpus", "dp_group", "priority", "stats", "board", "step_index", "busy", "version", "plan", "decoders",
        "_event", "on_first_token",
        # engine settings, the KV cache and the queues (_set_engine)
        "params", "bs", "max_tokens", "max_seqs", "caching", "chunked", "reserve_full", "max_model_len",
        "visible_us", "late_waits", "lag", "kv", "waiting", "waiting_tokens", "running", "prefilling",
        # the parts features add (_set_parts)
        "batcher", "_arrive", "_admit_queue", "handoff", "held", "reserved", "awaiting_blocks", "landed",
        "cpu", "cpu_loads", "loading", "cancellation", "aborts",
    )  # fmt: skip

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
        cancellable: bool = False,
        output_prediction: OutputPrediction | None = None,
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
        self._set_engine(params, output_prediction)
        self.stats = InstanceStats()
        if getattr(latency, "step_terms", None) is not None:  # the serving layer's terms (roofline3)
            self.stats.serving_steps = {}
        self.board = None  # the cluster's SignalBoard: this instance pushes its state there
        self.step_index = 0  # steps completed
        self.busy = False  # a plan is in flight (or about to be made)
        self.version = 0  # the live event's tag: an event of a plan cut short finds it changed
        self.plan = StepPlan()
        self.decoders = DecodeSet(params.block_size)
        # bound once: every step schedules it (with async scheduling, a wrapper that notes what was visible)
        self._event = self._on_event
        self.on_first_token: Callable[[Request, int], None] | None = None  # with hedging (see connect)
        self._set_parts(params, cpu, cancellable)

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
        self.on_first_token = first_token
        if self.role == "prefill":
            self.handoff.connect(prefilled)
        elif self.role == "decode":
            self.handoff.connect(reserved)

    def departed(self, req: Request, now: int, how: Departure) -> None:
        """``req`` leaves this engine ``how``: tell the departure listeners, the owning cluster first."""
        for listener in self.departure_listeners:
            listener(req, now, how)

    def _set_engine(self, params: EngineParams, output_prediction: OutputPrediction | None) -> None:
        """The engine settings under the short names the hot path reads, the KV cache and the queues (the
        predicted_output order reads the run's output predictions, shared by every engine of the run)."""
        self.params = params
        self.bs = params.block_size
        self.max_tokens = params.max_num_batched_tokens
        self.max_seqs = params.max_num_seqs
        self.caching = params.enable_prefix_caching
        self.chunked = params.enable_chunked_prefill
        self.reserve_full = params.scheduler_reserve_full_isl
        self.max_model_len = params.max_model_len
        # async scheduling (distsim.instance.scheduler): a waiting request enqueued after ``visible_us`` is not
        # yet seen by the step being planned; off, every request is (a time never reached)
        self.visible_us = ALWAYS_VISIBLE
        self.late_waits = False  # this step's admission met a request not yet visible: plan one step, no run
        # async scheduling: a new waiting head cuts a run one boundary later (the first step that can see it;
        # cutting at the next boundary would give the same results with one step planned alone, and an event, more)
        self.lag = 1 if params.async_scheduling else 0
        self.kv = KVCache(params.total_kv_blocks)
        prediction = () if output_prediction is None else (output_prediction,)
        self.waiting = QUEUES[params.scheduler](params.scheduler_aging_per_s, *prediction)
        self.waiting_tokens = 0  # tokens the waiting requests still have to prefill (a signal)
        self.running: dict[int, Request] = {}  # admission order
        self.prefilling: list[Request] = []  # running requests still in prefill, admission order

    def _set_parts(self, params: EngineParams, cpu: CpuKvTier | None, cancellable: bool) -> None:
        """The parts a feature adds, each built only when it is on, and the names the scheduler reads of
        them (empty without the part, so an engine without the feature pays nothing for it): the queueing
        discipline, the P/D side of this engine's role (distsim.instance.handoff), the CPU KV tier and its
        loads (distsim.instance.cpu_loads), the cancellation of hedged copies (distsim.instance.cancellation)."""
        # the queueing discipline, chosen once: continuous batching (this class's own arrival and admission)
        # or windowed prefill batching (distsim.instance.batching), whose two entry points the hot path calls
        self.batcher: PrefillBatcher | None = None
        if batching_on(params.prefill_batch_min, params.prefill_batch_window_us):
            self.batcher = PrefillBatcher(self, params.prefill_batch_min, params.prefill_batch_window_us)
        self._arrive = self.join_waiting if self.batcher is None else self.batcher.enqueue
        self._admit_queue = self.admit_waiting if self.batcher is None else self.batcher.admit_waiting
        self.handoff: PrefillSide | DecodeSide | None = None
        # read-only and shared by every engine without the part (a dict each would cost 64 bytes)
        self.held: Mapping[int, tuple[list, int]] = NONE  # P/D prefill side: blocks held until the KV is sent
        self.reserved: Mapping[int, Request] = NONE  # P/D decode side: blocks reserved while the KV moves
        self.awaiting_blocks = self.landed = ()  # P/D decode side: waiting for blocks; landed, for a slot
        if self.role == "prefill":
            self.handoff = side = PrefillSide(self)
            self.held = side.held
        elif self.role == "decode":
            self.handoff = side = DecodeSide(self)
            self.reserved, self.awaiting_blocks, self.landed = side.reserved, side.awaiting_blocks, side.landed
        self.cpu = cpu  # the CPU KV tier (distsim.instance.cpu_kv), or None
        self.cpu_loads = CpuLoads(self, cpu) if cpu is not None else None
        self.loading: Mapping[int, Request] = self.cpu_loads.loading if cpu is not None else NONE
        self.cancellation = Cancellation(self) if cancellable else None
        self.aborts = self.cancellation.aborts if cancellable else ()  # cancelled, leaving at the step's end

    def forget_caches(self) -> None:
        """Empty the caches, keeping the counters (a drained engine leaves; a later start is cold): the GPU
        prefix cache, and the CPU KV tier's blocks (and the storage tier's below it). It holds no request, so every block is free or evictable."""
        kv = KVCache(self.kv.total)
        kv.evictions = self.kv.evictions
        self.kv = kv
        if self.cpu is not None:
            self.cpu.blocks.clear()
            if self.cpu.storage is not None:
                self.cpu.storage.forget()

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

    def publish(self) -> None:
        """Push this engine's whole state to its board, if a policy reads signals live."""
        if self.board is not None:
            self.publish_to(self.board)

    def publish_queue(self) -> None:
        """Push only the waiting queue's length and tokens (what an arrival or a departure from it changes)."""
        if self.board is not None:
            self.board.waiting[self.slot] = len(self.waiting) + len(self.landed) + len(self.loading)
            self.board.queued_tokens[self.slot] = self.waiting_tokens

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, req: Request, now: int) -> None:
        """A request arrives at this instance's waiting queue."""
        req.instance = self.index
        req.enqueue_us = now
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
        self.departed(req, now, FINISHED)

    def can_ever_fit(self, req: Request) -> bool:
        """Whether the request, alone on this instance, could ever run to the end."""
        tokens = req.prompt_tokens if self.role == "prefill" else req.prompt_tokens + req.output_tokens - 1
        if tokens > self.params.total_kv_blocks * self.bs:  # more blocks than the cache holds
            return False
        return self.chunked or req.prompt_tokens <= self.max_tokens

    def join_waiting(self, req: Request, now: int) -> None:
        """``req`` joins the waiting queue now (continuous batching's arrival; a batching window's release):
        an idle engine wakes, a run that the new head could join is cut."""
        req.seq.enqueued_us = now
        waiting = self.waiting
        waiting.append(req)
        self.waiting_tokens += req.prompt_tokens + req.generated
        if self.board is not None:
            self.publish_queue()
        if not self.busy:
            self.wake(now)
        elif self.plan.ends_us is not None and waiting.peek() is req:
            self.cut_run(now, self.lag)

    def cut_run(self, now: int, lag: int = 0) -> None:
        """Work that could join a fast-forwarded run arrived: end the run at the next step boundary (if a
        sequence slot is free for it), or ``lag`` boundaries later."""
        if len(self.running) < self.max_seqs:
            self.cut(now, lag)

    def new_work(self, now: int) -> None:
        """Work that could run arrived (a landed KV or CPU load, an incoming KV's blocks to reserve): wake
        an idle instance, or end a fast-forwarded run at the next step boundary."""
        if not self.busy:
            self.wake(now)
        else:
            self.cut_run(now)

    def cut(self, now: int, lag: int = 0) -> None:
        """End a fast-forwarded run at the next step boundary whatever joins (a cancelled request leaves)."""
        plan = self.plan
        if plan.ends_us is not None and plan.cut(now, lag):
            self.version = version = self.version + 1
            self.loop.schedule(plan.end_us, self.priority, self._event, version)

    def wake(self, now: int) -> None:
        """An idle instance plans a step at ``now`` (something arrived, or blocks came free)."""
        self.busy = True
        self.plan.steps = 0
        self.version = version = self.version + 1
        self.loop.schedule(now, self.priority, self._event, version)

    # ------------------------------------------------------------------ the step cycle
    def _on_event(self, now: int, version: int) -> None:
        """The step event. Under async scheduling (``lag``) the next step was scheduled when the one ending
        now began (a run's last step), so only requests enqueued by then are visible; an idle engine sees
        all at once."""
        if version != self.version:
            return  # a run that was cut short
        plan = self.plan
        if plan.steps:
            if self.lag:
                self.visible_us = plan.last_begin_us()
            self._apply_plan(now)
        elif self.lag:
            self.visible_us = now
        if self.aborts:
            self.cancellation.apply(now)
        stats = self.stats
        waiting = len(self.waiting)
        if waiting > stats.peak_waiting:  # the queue only grows between step events
            stats.peak_waiting = waiting
        self._plan_next(now)
        running = len(self.running)
        if running > stats.peak_running:
            stats.peak_running = running
        used = self.kv.used()
        if used != stats.kv_last:
            stats.kv_last = used
            stats.kv_change_blocks.append(used)
            stats.kv_change_us.append(now)
        if self.board is not None:
            self.publish_to(self.board)

    # long: everything at the end of every plan, the hot path, in one place (no call per concern)
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
        shapes = stats.serving_steps
        if shapes is not None:  # the steps by shape: the serving layer's share, priced at the end
            chunks = plan.chunks
            key = (b + sum(n for _, n in chunks), b + len(chunks)) if chunks else b
            shapes[key] = shapes.get(key, 0) + k
        ends = plan.ends_us
        if ends is not None:  # a fast-forwarded run
            if k > 1:  # its first step took its blocks when planned; the rest take theirs now
                grown = dec.block_need(start + 1, k - 1)
                kv.allocate(grown)
                if grown:  # the KV notes get them step by step at the end, as stepping notes them (InstanceStats)
                    runs = stats.kv_runs
                    runs += (len(stats.itl_run_counts), start, k)
                    runs += dec.phase_counts
                    stats.kv_last += grown
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
            new = self.kv.register(hashes, seq.hashed_blocks, full, seq.runs)
            seq.private_blocks -= new
            seq.shared_blocks += new
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
            self.handoff.hand_off(req, now)
        elif req.generated >= req.output_tokens:
            req.seq.phase = DONE
            self._finish(req, now, req.seq.private_blocks)
        else:
            self.decoders.join(req, self.step_index)

    def _finish(self, req: Request, now: int, private: int) -> None:
        seq = req.seq
        self.kv.release(seq.runs, private)
        seq.shared_blocks = 0
        seq.runs = []
        seq.private_blocks = 0
        seq.phase = DONE
        req.completion_us = now
        req.last_token_us = now
        req.status = COMPLETED
        del self.running[req.request_id]
        self.stats.completed += 1
        for listener in self.departure_listeners:
            listener(req, now, FINISHED)

    def cancel(self, req: Request, now: int) -> None:
        """Stop serving ``req`` (a hedge's losing copy; distsim.instance.cancellation says when it leaves)."""
        self.cancellation.cancel(req, now)

    def work_done(self, req: Request) -> tuple[int, int]:
        """The prompt tokens computed here for ``req`` (recomputes included) and the tokens it generated."""
        seq = req.seq
        return (seq.prefilled if seq is not None else 0), req.generated

    def run_blocks_by(self, now: int) -> int:
        """Blocks the fast-forwarded run has taken by ``now`` beyond its first step (for live signals)."""
        started = self.plan.steps_started_after_first(now)
        return self.decoders.block_need(self.plan.start + 1, started) if started > 0 else 0

    def run_blocks_at(self, now: int) -> tuple[int, int]:
        """``run_blocks_by(now)`` and the last instant it holds: the end of the step before the next one
        that takes a block (a step takes its blocks when the one before it ends), -1 when no later step
        of the run takes one. A cut only shortens the run, so a value stays right until it is applied."""
        plan = self.plan
        ends = plan.ends_us
        last = plan.steps - 1
        # plan.steps_started_after_first(now), inlined: every read that crosses a block boundary asks
        started = 0 if ends is None or last <= 0 else bisect_left(ends, now)
        if started > last:
            started = last
        taken, ahead = self.decoders.taken_and_next(plan.start + 1, started, last)
        return taken, (ends[started + ahead] if ahead >= 0 else -1)

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
        tests call it after every event): distsim.instance.checks, then the parts' own."""
        check_instance(self)
        if self.cpu_loads is not None:
            self.cpu_loads.check(f"instance {self.index}")
        if self.batcher is not None:
            self.batcher.check()
