"""One autoscaled pool's replicas: their states, what each has been billed, and the pool's timeline.

A replica is one configured instance (its ``data_parallel_size`` engines together). States:
off -> provisioning (billed, not serving) -> serving -> draining (billed, not taking requests) -> off.
A scale-down may also cancel a replica still provisioning (billed until then). Billing is a list of
[start, end) intervals per replica; open ones end with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OFF, PROVISIONING, SERVING, DRAINING = "off", "provisioning", "serving", "draining"


@dataclass
class Replica:
    engines: tuple[int, ...]  # global instance indices
    state: str = OFF
    order: int = -1  # when it was last asked for (a sequence number): among equals the newest drains first
    used: bool = False  # has served before: it starts cold again (empty caches) when asked for anew
    tag: int = 0  # bumped at every change, so a provisioning timer of a cancelled start is ignored
    bills: list[list[int | None]] = field(default_factory=list)  # [start_us, end_us or None while billed]


class PoolReplicas:
    """The replicas of one pool and its timeline rows (time_us, serving, provisioning, draining, desired)."""

    def __init__(self, name: str, engines: list[tuple[int, ...]], initial: int):
        self.name = name
        self.replicas = [Replica(e) for e in engines]
        self._orders = 0
        self.timeline: list[tuple[int, int, int, int, int]] = []
        for replica in self.replicas[:initial]:
            self.bill(replica, 0, SERVING)
            replica.used = True

    def count(self, state: str) -> int:
        return sum(r.state == state for r in self.replicas)

    def in_state(self, state: str) -> list[Replica]:
        return [r for r in self.replicas if r.state == state]

    def serving_engines(self) -> np.ndarray:
        """The serving replicas' engines, replica by replica (ascending)."""
        return np.array([e for r in self.replicas if r.state == SERVING for e in r.engines], dtype=np.int64)

    def bill(self, replica: Replica, now: int, state: str) -> None:
        """``replica`` is asked for: billed from ``now``, in ``state`` (provisioning, or serving at the start)."""
        replica.state, replica.order, replica.tag = state, self._orders, replica.tag + 1
        self._orders += 1
        replica.bills.append([now, None])

    def set_state(self, replica: Replica, state: str) -> None:
        replica.state, replica.tag = state, replica.tag + 1

    def release(self, replica: Replica, now: int) -> None:
        """``replica`` leaves (drained, or its start cancelled): off, billing stops."""
        self.set_state(replica, OFF)
        replica.bills[-1][1] = now

    def record(self, now: int, desired: int) -> None:
        """A timeline row when anything changed since the last one."""
        row = (now, self.count(SERVING), self.count(PROVISIONING), self.count(DRAINING), desired)
        if self.timeline and self.timeline[-1][0] == now:  # one row per instant: the last state at it
            self.timeline[-1] = row
        elif not self.timeline or self.timeline[-1][1:] != row[1:]:
            self.timeline.append(row)

    def billed_us(self, start_us: int, end_us: int) -> dict[int, int]:
        """Microseconds each engine was billed within [start_us, end_us] (open intervals end at end_us)."""
        out: dict[int, int] = {}
        for r in self.replicas:
            total = sum(max(0, min(end_us, b if b is not None else end_us) - max(start_us, a)) for a, b in r.bills)
            for e in r.engines:
                out[e] = total
        return out
