"""The event loop: one heap ordered by (time, priority, sequence).

Time is integer microseconds. At equal times, events run by priority: cluster events (arrivals,
routing, transfers) before instance events, lower instance index first; the sequence number breaks the
remaining ties in scheduling order. Handlers are plain callables ``handler(now, arg)``; an entry is a
tuple so the heap compares integers only (the sequence number is unique, so handlers are never compared).

The clock never goes backwards: scheduling into the past is a bug and raises SimulationError.
``after_event`` (None by default) is a public hook called with the time after every event: tests check
invariants through it instead of patching handlers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from distsim.errors import SimulationError

# Priorities at equal time: smaller runs first.
PRIO_ARRIVAL = 0  # a request enters the cluster
PRIO_CLUSTER = 10  # other cluster events: delayed deliveries, KV transfers, signal refreshes
PRIO_AUTOSCALE = 20  # autoscaler evaluations and replica changes: after the cluster's events, before steps
PRIO_INSTANCE = 1000  # instance i's step events run at PRIO_INSTANCE + i

Handler = Callable[[int, Any], None]  # called with the time and the argument scheduled with it, whatever its type


class EventLoop:
    """A SimPy-sized event core: schedule callbacks at integer-microsecond times and run them in order."""

    __slots__ = ("now", "horizon_us", "events", "after_event", "_heap", "_seq")

    def __init__(self, horizon_us: int | None = None):
        self.now = 0
        self.horizon_us = horizon_us
        self.events = 0
        self.after_event: Callable[[int], None] | None = None
        self._heap: list[tuple[int, int, int, Handler, object]] = []
        self._seq = itertools.count()

    def schedule(self, time: int, priority: int, handler: Handler, arg: object = None) -> None:
        if time < self.now:
            raise SimulationError(f"event scheduled in the past: t={time}us < now={self.now}us ({handler!r})")
        heapq.heappush(self._heap, (time, priority, next(self._seq), handler, arg))

    def run(self) -> int:
        """Run until no events remain or the next one lies past the horizon; return the final time."""
        heap = self._heap
        pop = heapq.heappop
        horizon = self.horizon_us
        after = self.after_event
        now = self.now
        events = 0
        if horizon is None and after is None:  # the common case, without the two checks per event
            while heap:
                time, _prio, _seq, handler, arg = pop(heap)
                if time < now:  # cannot happen through schedule(); guards direct heap misuse
                    raise SimulationError(f"clock went backwards: {time}us after {now}us")
                now = self.now = time
                handler(time, arg)
                events += 1
            self.events += events
            return now
        while heap:
            if horizon is not None and heap[0][0] > horizon:
                now = horizon
                break
            time, _prio, _seq, handler, arg = pop(heap)
            if time < now:  # cannot happen through schedule(); guards direct heap misuse
                raise SimulationError(f"clock went backwards: {time}us after {now}us")
            now = time
            self.now = time
            handler(time, arg)
            if after is not None:
                after(time)
            events += 1
        self.now = now
        self.events += events
        return now

    def pending(self) -> int:
        return len(self._heap)

    def drop(self, *owners: object) -> int:
        """Remove the pending events whose handler is a method of one of ``owners`` (timers: the autoscaler's,
        the hedgers', the prefill batchers', once the run has nothing left to do, so they do not prolong it);
        returns how many. O(pending), once per run."""
        heap = self._heap
        ids = {id(owner) for owner in owners}
        keep = [e for e in heap if id(getattr(e[3], "__self__", None)) not in ids]
        dropped = len(heap) - len(keep)
        heap[:] = keep  # in place: run() holds the list
        heapq.heapify(heap)
        return dropped

    def events_run(self) -> int:
        """Events run so far, readable from another thread while :meth:`run` runs (a progress line):
        the events scheduled (the sequence counter, read through its repr without advancing it) minus
        those pending, so ``run`` pays nothing per event for it. Equals ``events`` between runs."""
        return int(repr(self._seq)[6:-1]) - len(self._heap)
