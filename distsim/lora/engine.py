"""The LoRA engine: the plain engine with adapter slots, chosen when the engine is built.

Why a mixin picked at construction (as distsim.instance.speculative.engine): an engine without LoRA is the
plain :class:`~distsim.instance.instance.Instance`, its hot path untouched. A LoRA engine admits through a
gate over its waiting queue (:class:`AdapterGate`) that, as vLLM's scheduler does, passes over a request
whose adapter cannot run in this step and keeps the rest in their order: its adapter is loading, or it
has no slot (every slot is held by adapters the running batch uses: vLLM's ``max_loras`` check, since
the slots are ``max_loras``). A request at the head whose adapter has no slot but could get one starts
its load and waits out of the step while it lands (distsim.lora.slots). The running requests pin their
adapters' slots; the step time adds the batched adapters' term (distsim.lora.step_cost).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from distsim.events.loop import PRIO_CLUSTER
from distsim.lora.slots import AdapterSlots
from distsim.lora.step_cost import LoraStepCost, LoraStepTime

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.instance.phase import Phase
    from distsim.request import Request


class AdapterGate:
    """A waiting queue as one admission sees it: the requests whose adapters cannot run now are set aside
    (and put back in order by ``restore``); a cold adapter's load starts when its request reaches the head and
    the step sees it (async scheduling: as the admission itself, distsim.instance.scheduler)."""

    def __init__(self, queue, engine: LoraEngine, now: int, chunks: list):
        self.queue, self.engine, self.now, self.chunks = queue, engine, now, chunks
        self.aside: list[Request] = []

    def peek(self) -> Request | None:
        queue, engine, now = self.queue, self.engine, self.now
        slots = engine.lora
        while queue:
            req = queue.peek()
            adapter = req.adapter
            if adapter < 0 or slots.ready(adapter, now):
                return req  # no adapter, or its adapter is ready (the admission decides the rest)
            if req.seq.enqueued_us > engine.visible_us and (self.chunks or engine.decoders.count):
                return req  # async scheduling: this step does not see it yet, and the admission stops there
            if not slots.loading(adapter, now):
                landed = slots.start_load(adapter, now)
                if landed is not None:
                    engine.loop.schedule(landed, PRIO_CLUSTER, engine.adapter_landed, adapter)
            engine.waited.add(req.request_id)
            queue.popleft()
            self.aside.append(req)
        return None

    def __len__(self) -> int:
        return 0 if self.peek() is None else len(self.queue)

    def popleft(self) -> Request:
        return self.queue.popleft()

    def restore(self) -> None:
        queue = self.queue
        for req in reversed(self.aside):
            queue.appendleft(req)


class OrderedAdapterGate(AdapterGate):
    """The gate over an ordered queue (priority, shortest_prompt), whose admission may set requests aside too."""

    def set_aside(self) -> None:
        self.queue.set_aside()

    def restore_aside(self) -> None:
        self.queue.restore_aside()


class LoraEngine:
    """The LoRA step cycle, mixed in before an Instance class (see :func:`lora_class`)."""

    __slots__ = ()  # the slots object lives in the class lora_class makes (its one slot, ``lora``)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        s = self.params.lora
        self.lora = AdapterSlots(s.max_loras, s.max_cpu_loras, s)
        self.latency = LoraStepTime(self.latency, self.lora, LoraStepCost(s))

    def admit_waiting(self, waiting, now: int, budget: int, need_dec: int, chunks: list) -> int:
        gate = (OrderedAdapterGate if hasattr(waiting, "set_aside") else AdapterGate)(waiting, self, now, chunks)
        budget = super().admit_waiting(gate, now, budget, need_dec, chunks)
        gate.restore()
        return budget

    def adapter_landed(self, now: int, adapter: int) -> None:
        """An adapter's load landed: its waiting requests may run."""
        if self.waiting:
            self.new_work(now)

    def join_waiting(self, req: Request, now: int) -> None:
        """As the plain engine's, and a run in flight ends at the next boundary whoever arrives: the head may
        be a request set aside, and the newcomer's adapter may be ready (or its load due to start)."""
        super().join_waiting(req, now)
        if self.plan.ends_us is not None and self.waiting.peek() is not req:
            self.cut_run(now, self.lag)

    def _start_prefill(self, req: Request, now: int, hits: int, n: int, nb: int) -> None:
        first = req.first_scheduled_us < 0
        super()._start_prefill(req, now, hits, n, nb)
        adapter = req.adapter
        if adapter >= 0:
            self.lora.pin(adapter)
            if first:
                counts = self.lora.counts
                if req.request_id in self.waited:
                    self.waited.discard(req.request_id)
                    counts.misses += 1
                else:
                    counts.hits += 1

    def _finish(self, req: Request, now: int, private: int) -> None:
        if req.adapter >= 0:
            self.lora.unpin(req.adapter)
        super()._finish(req, now, private)

    def leave_running(self, req: Request, now: int, phase: Phase) -> None:
        if req.adapter >= 0:
            self.lora.unpin(req.adapter)
        super().leave_running(req, now, phase)

    def _go_idle(self) -> None:
        """Idle while adapters load: their landing wakes the engine (no deadlock, INV-12)."""
        if self.waiting and self.lora.in_flight(self.loop.now):
            self.busy = False
            self.plan.steps = 0
            return
        super()._go_idle()

    @property
    def waited(self) -> set[int]:
        return self.lora.waited

    def check_invariants(self) -> None:
        super().check_invariants()
        by_adapter: dict[int, int] = {}
        for req in self.running.values():
            if req.adapter >= 0:
                by_adapter[req.adapter] = by_adapter.get(req.adapter, 0) + 1
        self.lora.check(f"instance {self.index}", by_adapter, self.loop.now)


@cache
def lora_class(base: type[Instance]) -> type[Instance]:
    """``base`` (Instance, or a subclass such as ObservedInstance) with adapter slots."""
    return type(f"Lora{base.__name__}", (LoraEngine, base), {"__slots__": ("lora",)})
