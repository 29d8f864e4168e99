"""The base of ordered queues: a heap keyed by ``key(request)``, ties broken by arrival at the queue."""

from __future__ import annotations

import heapq
import itertools

from distsim.request import Request


class KeyedQueue:
    """A heap keyed by ``key(request)``; preempted requests go ahead of everything (key -inf).

    Aging (``aging_per_s``, cluster.engine.scheduler_aging_per_s): a request's key falls by that much per
    second it has waited since its arrival, so a long prompt or a low class is not starved. The fall is
    linear in time and the same for every request, so ordering by ``key - aging x (now - arrival)`` at any
    time is ordering by ``key + aging x arrival``: a static key, and the heap stays valid as time passes."""

    __slots__ = ("_heap", "_seq", "_aside", "aging_per_us")

    def key(self, req: Request) -> tuple:
        raise NotImplementedError

    def __init__(self, aging_per_s: float = 0.0):
        self.aging_per_us = aging_per_s / 1e6
        self._heap: list = []
        self._seq = itertools.count()
        self._aside: list = []  # entries hidden from one admission (async scheduling: not yet visible)

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

    def set_aside(self) -> None:
        """Hide the head from the rest of this admission (async scheduling: it is not yet visible)."""
        self._aside.append(heapq.heappop(self._heap))

    def restore_aside(self) -> None:
        """Put the hidden entries back, each with its own place in the order."""
        for entry in self._aside:
            heapq.heappush(self._heap, entry)
        self._aside.clear()

    def remove(self, req: Request) -> None:
        """Take ``req`` out wherever it is (a cancelled request); O(n), as deque.remove."""
        heap = self._heap
        i = next(i for i, entry in enumerate(heap) if entry[2] is req)
        heap[i] = heap[-1]
        heap.pop()
        heapq.heapify(heap)

    def __iter__(self):
        return (entry[2] for entry in sorted(self._heap))
