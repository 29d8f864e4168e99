"""Cancelling requests on an engine, as vLLM aborts a request between engine steps (a hedge's losing copy,
distsim.cluster.hedging).

Built with the instance when its cluster hedges (distsim.instance.instance), else not at all: the step's
only cost is the instance's check of ``aborts`` (an empty tuple without this object). A waiting request
leaves at once; one loading its blocks from the CPU KV tier when its load lands; a running one at the end
of the step in flight (whose work for it is spent; a fast-forwarded run is cut there). Each tells its
departure (ABORTED) once it is gone and its blocks are free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.instance.departure import Departure
from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.engine import Engine
    from distsim.request import Request

WAITING, DONE = Phase.WAITING, Phase.DONE
ABORTED = Departure.ABORTED


class Cancellation:
    """One engine's cancelled requests still to let go: running ones (``aborts``, at the next step
    boundary) and loading ones (``abort_loads``, request ids, when their load lands)."""

    def __init__(self, inst: Engine):
        self.inst = inst
        self.aborts: list[Request] = []
        self.abort_loads: set[int] = set()

    def cancel(self, req: Request, now: int) -> None:
        """Stop serving ``req``. A request already finished here is left alone."""
        inst = self.inst
        seq = req.seq
        if seq.phase == DONE or req in self.aborts:
            return
        if req.request_id in inst.loading:
            self.abort_loads.add(req.request_id)
        elif seq.phase == WAITING:
            inst.waiting.remove(req)
            inst.waiting_tokens -= req.prompt_tokens + req.generated
            seq.phase = DONE
            inst.publish_queue()
            inst.departed(req, now, ABORTED)
        else:
            self.aborts.append(req)
            inst.cut(now)

    def apply(self, now: int) -> None:
        """At a step boundary: the cancelled running requests leave, freeing their blocks (as a preemption
        does, without going back to the queue)."""
        inst = self.inst
        aborts = self.aborts[:]
        self.aborts.clear()  # in place: the instance reads this list every step
        for req in aborts:
            if req.seq.phase != DONE:  # else it finished in the step that just ended (the cluster heard of it)
                inst.leave_running(req, now, DONE)
                inst.departed(req, now, ABORTED)

    def load_aborted(self, req: Request) -> bool:
        """A CPU load landed: whether its request was cancelled meanwhile (it leaves then)."""
        if req.request_id in self.abort_loads:
            self.abort_loads.discard(req.request_id)
            return True
        return False
