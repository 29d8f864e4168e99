"""First come, first served: vLLM's default order."""

from __future__ import annotations

from collections import deque

from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("fcfs")
class FCFSQueue(deque):
    """A deque: arrivals at the back, preempted requests back at the front."""

    def __init__(self, aging_per_s: float = 0.0):
        super().__init__()  # arrival order already ages: nothing to add (checks refuse aging with fcfs)

    def peek(self) -> Request:
        return self[0]
