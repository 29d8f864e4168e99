"""P/D disaggregation on one engine: the prefill side's held blocks, the decode side's incoming KVs.

An engine of role ``prefill`` holds a :class:`PrefillSide`, one of role ``decode`` a :class:`DecodeSide`, a
mixed one neither (built with the instance, distsim.instance.instance). The cluster moves the KV between
them (distsim.cluster.cluster: it routes both at arrival, times the transfer, then tells both sides).

Prefill side: the prompt is computed and the first token sampled; the request leaves the running set but
its blocks stay held until the KV has been sent, then they are released (a departure, RELEASED).

Decode side: an incoming request first needs blocks for its prompt's KV and its first decode slot; they are
reserved in the step's admission phase (after the running requests, in arrival order, only once no
preempted request waits ahead, like vLLM's waiting loop), then the KV moves, then the request lands
holding every block its first decode step needs and waits only for a sequence slot. Landed requests are
admitted before requests waiting for a recompute: they need no new blocks, so they never wait behind one
that does (which could leave an engine whose blocks all sit in landed requests with nothing to run).

The scheduler reads the sides' queues every step through the instance's own names (``landed``,
``awaiting_blocks``; ``held`` and ``reserved`` when it goes idle), which are these objects' (empty ones
on an engine without the side), so an engine without P/D pays nothing for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from distsim.instance.decode_set import ceil_div
from distsim.instance.departure import Departure
from distsim.instance.phase import Phase
from distsim.instance.sequence import SeqState

if TYPE_CHECKING:
    from distsim.instance.engine import Engine
    from distsim.request import Request

Handler = Callable[["Request", int], None]


class PrefillSide:
    """A prefill engine's requests handed off: their blocks, held until their KV has been sent."""

    def __init__(self, inst: Engine):
        self.inst = inst
        self.held: dict[int, tuple[list, int]] = {}  # request id -> (shared block hashes, private blocks)
        self.prefilled: Handler | None = None  # the cluster's: the prompt is computed, send its KV

    def connect(self, prefilled: Handler) -> None:
        self.prefilled = prefilled

    def hand_off(self, req: Request, now: int) -> None:
        """The prompt is computed and the first token sampled; keep the blocks until the KV has been sent,
        free the sequence slot."""
        inst = self.inst
        seq = req.seq
        del inst.running[req.request_id]
        self.held[req.request_id] = (seq.runs, seq.private_blocks)
        seq.clear(Phase.HANDED_OFF)
        inst.stats.handed_off += 1
        self.prefilled(req, now)

    def release(self, req: Request, now: int) -> None:
        """The KV transfer has finished; free the request's blocks (a waiting prompt may have been held back
        by them)."""
        inst = self.inst
        shared, private = self.held.pop(req.request_id)
        inst.kv.release(shared, private)
        if not inst.busy and inst.waiting:
            inst.wake(now)
        inst.publish()
        inst.departed(req, now, Departure.RELEASED)


class DecodeSide:
    """A decode engine's incoming requests, in the order one passes through: waiting for blocks for its KV
    (``awaiting_blocks``), blocks reserved while the KV moves (``reserved``), landed holding its blocks and
    waiting for a sequence slot (``landed``)."""

    def __init__(self, inst: Engine):
        self.inst = inst
        self.awaiting_blocks: deque[Request] = deque()
        self.reserved: dict[int, Request] = {}
        self.landed: deque[Request] = deque()
        self.reserved_blocks: Handler | None = None  # the cluster's: blocks are reserved, send the KV

    def connect(self, reserved: Handler) -> None:
        self.reserved_blocks = reserved

    def incoming(self, req: Request, now: int) -> None:
        """A prefilled request wants blocks for its KV; served at the next step boundary."""
        inst = self.inst
        req.instance = inst.index
        req.seq = SeqState()  # this instance's own state from here on
        self.awaiting_blocks.append(req)
        inst.new_work(now)

    def reserve(self, now: int, need_dec: int) -> None:
        """Reserve blocks for incoming KVs in arrival order, leaving this step's decode blocks."""
        inst = self.inst
        kv = inst.kv
        while self.awaiting_blocks:
            req = self.awaiting_blocks[0]
            need = ceil_div(req.prompt_tokens + 1, inst.bs)  # the prompt's KV and the first decode slot
            if need > kv.available() - need_dec:
                return
            self.awaiting_blocks.popleft()
            kv.allocate(need)
            seq = req.seq
            seq.private_blocks = need
            seq.alloc_tokens = req.prompt_tokens + 1
            seq.computed = req.prompt_tokens
            self.reserved[req.request_id] = req
            self.reserved_blocks(req, now)

    def receive(self, req: Request, now: int) -> None:
        """The KV has landed; the request waits for a sequence slot to decode."""
        inst = self.inst
        del self.reserved[req.request_id]
        req.seq.phase = Phase.WAITING
        self.landed.append(req)
        inst.waiting_tokens += 1  # its next decode token
        inst.publish_queue()
        inst.new_work(now)

    def admit_landed(self, budget: int) -> int:
        """Landed requests join the decoders while sequence slots and budget last."""
        inst = self.inst
        running = inst.running
        landed = self.landed
        while landed and budget > 0 and len(running) < inst.max_seqs:
            req = landed.popleft()
            inst.waiting_tokens -= 1
            running[req.request_id] = req
            inst.stats.admitted += 1
            inst.decoders.join(req, inst.step_index)  # decodes in this step: generated 1 = offset + c
            budget -= 1
        return budget
