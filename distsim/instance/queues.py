"""Waiting-queue orders for an instance (``cluster.engine.scheduler``).

A queue offers append (a new arrival), appendleft (a preempted request goes back to the front, as in
vLLM), peek, popleft and len. FCFS is a deque; other orders are one small class each.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable

from distsim.request import Request

QUEUES: dict[str, Callable[[], object]] = {}


def register_queue(name: str):
    def deco(cls):
        QUEUES[name] = cls
        return cls

    return deco


@register_queue("fcfs")
class FCFSQueue(deque):
    """First come, first served (vLLM's default)."""

    def peek(self) -> Request:
        return self[0]


class _KeyedQueue:
    """A heap keyed by ``key(request)``; preempted requests go ahead of everything (key -inf)."""

    __slots__ = ("_heap", "_seq")

    def key(self, req: Request) -> tuple:
        raise NotImplementedError

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def append(self, req: Request) -> None:
        heapq.heappush(self._heap, (self.key(req), next(self._seq), req))

    def appendleft(self, req: Request) -> None:
        heapq.heappush(self._heap, ((float("-inf"),), -next(self._seq), req))

    def peek(self) -> Request:
        return self._heap[0][2]

    def popleft(self) -> Request:
        return heapq.heappop(self._heap)[2]

    def __iter__(self):
        return (entry[2] for entry in sorted(self._heap))


@register_queue("priority")
class PriorityQueue(_KeyedQueue):
    """Higher ``Request.priority`` first (an SLO class's priority), FCFS within a priority."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        return (-req.priority, req.arrival_us)


@register_queue("shortest_prompt")
class ShortestPromptQueue(_KeyedQueue):
    """Shortest prompt first: cuts mean TTFT under load at the risk of starving long prompts."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        return (req.prompt_tokens, req.arrival_us)
