"""Priority order: an SLO class's priority decides who is scheduled first."""

from __future__ import annotations

from distsim.instance.queues.keyed import KeyedQueue
from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("priority")
class PriorityQueue(KeyedQueue):
    """Higher ``Request.priority`` first (an SLO class's priority), FCFS within a priority; with aging, a
    request gains one priority level per 1 / aging seconds waited."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        if self.aging_per_us:
            return (req.arrival_us * self.aging_per_us - req.priority, req.arrival_us)
        return (-req.priority, req.arrival_us)
