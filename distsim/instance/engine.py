"""The engine as its parts see it: what the P/D sides (distsim.instance.handoff), the cancellation of hedged
copies (distsim.instance.cancellation), the CPU KV tier's loads (distsim.instance.cpu_loads), windowed
prefill batching (distsim.instance.batching) and the invariant checks (distsim.instance.checks) may read and
call on the instance they belong to.

Why: a part changes the engine's state between its steps (a request leaves, work lands, a run must end
early), and it must do so through the same few doors the engine uses itself, so the engine's bookkeeping
(the board, the departure listeners, a fast-forwarded run) stays whole. Naming those doors here lets the parts
depend on this interface instead of on :class:`distsim.instance.instance.Instance`, which builds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from distsim.events.loop import EventLoop
    from distsim.instance.decode_set import DecodeSet
    from distsim.instance.departure import Departure
    from distsim.instance.kv_cache import KVCache
    from distsim.instance.phase import Phase
    from distsim.instance.plan import StepPlan
    from distsim.instance.stats import InstanceStats
    from distsim.request import Request


class LoadAborts(Protocol):
    """The cancellation part as the CPU loads ask it: was a landed load's request cancelled meanwhile."""

    def load_aborted(self, req: Request, /) -> bool: ...


class Engine(Protocol):
    """One engine (distsim.instance.instance.Instance) as its parts see it: its state, and the doors through
    which a part changes it between steps."""

    index: int
    loop: EventLoop
    stats: InstanceStats
    kv: KVCache
    bs: int  # block size, tokens
    max_seqs: int
    max_tokens: int  # the step's token budget
    reserve_full: bool  # admit only with blocks for the whole prompt free
    lag: int  # step boundaries before a new waiting head can join a run (1 under async scheduling)
    busy: bool  # a plan is in flight
    step_index: int
    plan: StepPlan
    decoders: DecodeSet
    waiting: object  # the waiting queue (distsim.instance.queues): append, appendleft, peek, popleft, remove, len
    waiting_tokens: int
    running: dict[int, Request]
    held: Mapping[int, tuple[list, int]]  # P/D prefill side
    reserved: Mapping[int, Request]  # P/D decode side
    awaiting_blocks: Sequence[Request]
    landed: Sequence[Request]
    loading: Mapping[int, Request]  # CPU KV loads in flight
    cancellation: LoadAborts | None

    def departed(self, req: Request, now: int, how: Departure) -> None:
        """``req`` leaves the engine ``how``: the departure listeners hear of it."""
        ...

    def publish(self) -> None:
        """Push the engine's state to its board (signals read live)."""
        ...

    def publish_queue(self) -> None:
        """Push the waiting queue's length and tokens to the board."""
        ...

    def join_waiting(self, req: Request, now: int) -> None:
        """``req`` joins the waiting queue: an idle engine wakes, a run the new head could join is cut."""
        ...

    def wake(self, now: int) -> None:
        """An idle engine plans a step at ``now``."""
        ...

    def cut(self, now: int, lag: int = 0) -> None:
        """End a fast-forwarded run at the next step boundary (or ``lag`` boundaries later)."""
        ...

    def cut_run(self, now: int, lag: int = 0) -> None:
        """As :meth:`cut`, when a sequence slot is free for what arrived."""
        ...

    def new_work(self, now: int) -> None:
        """Work that could run arrived: wake an idle engine, or cut its run."""
        ...

    def leave_running(self, req: Request, now: int, phase: Phase) -> None:
        """Take a running request out of the batch between steps, into ``phase``."""
        ...

    def admit_waiting(self, waiting: object, now: int, budget: int, need_dec: int, chunks: list) -> int:
        """The step's admission from ``waiting`` (vLLM's waiting loop); the token budget it leaves."""
        ...
