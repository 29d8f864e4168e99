"""The runtime's queue and its batch-closing rule, apart from the events that drive it (replica.py).

Triton's dynamic batcher, as distsim models it: requests wait in arrival order; a batch takes requests from
the head while their items fit ``max_batch_size`` (a request is never split, and one that does not fit
closes the batch: no skipping ahead). A batch may leave when it is full, or when its oldest request has
waited ``window_us`` (Triton's max_queue_delay; 0: at once), and only when a concurrency slot is free: a
closed batch that finds every slot busy leaves when one frees.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from distsim.request import Request


class Batch(NamedTuple):
    """A batch as it ran: its requests, items, largest item size, when its oldest request was queued, when
    it started and ends, and whether it left full (else by the window, or the slot that freed after it)."""

    requests: tuple[Request, ...]
    items: int
    size: float
    oldest_us: int
    start_us: int
    end_us: int
    full: bool


class Batcher:
    """A FIFO of (request, queued at) with its total items."""

    __slots__ = ("max_items", "window_us", "queue", "items")

    def __init__(self, max_items: int, window_us: int):
        self.max_items = max_items
        self.window_us = window_us
        self.queue: deque[tuple[Request, int]] = deque()
        self.items = 0

    def __len__(self) -> int:
        return len(self.queue)

    def add(self, req: Request, now: int) -> None:
        self.queue.append((req, now))
        self.items += req.items

    def deadline(self) -> int | None:
        """When the head's window ends (None: nothing queued)."""
        return self.queue[0][1] + self.window_us if self.queue else None

    def ready(self, now: int) -> bool:
        """A batch may leave now: a full one's worth is queued, or the head's window has ended."""
        return bool(self.queue) and (self.items >= self.max_items or self.queue[0][1] + self.window_us <= now)

    def take(self) -> tuple[list[Request], int, int, bool]:
        """The next batch from the head: (requests, items, oldest queued at, full)."""
        queue = self.queue
        oldest = queue[0][1]
        taken: list[Request] = []
        items = 0
        while queue and items + queue[0][0].items <= self.max_items:
            req = queue.popleft()[0]
            taken.append(req)
            items += req.items
        self.items -= items
        return taken, items, oldest, items >= self.max_items or bool(queue)
