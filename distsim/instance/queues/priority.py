"""Priority order: an SLO class's priority decides who is scheduled first."""

from __future__ import annotations

from distsim.instance.queues.keyed import KeyedQueue
from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("priority")
class PriorityQueue(KeyedQueue):
    """Higher ``Request.priority`` first (an SLO class's priority), FCFS within a priority."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        return (-req.priority, req.arrival_us)
