"""vLLM's data-parallel balancer: one configured instance with ``data_parallel_size`` N is N engine
replicas behind one API server, whose client sends each request to the least-loaded replica.

The cluster's router scores the engines as usual; its pick names a DP group (the configured instance
that engine belongs to), and inside that group this balancer chooses the engine with the lowest score
4 x waiting + running, as vLLM's DP client (DPLBAsyncMPClient) scores its engines (a queued request
weighs four running ones: it delays a first token), ties to the lowest index (deterministic). It reads the
engines' live counts, as vLLM's client reads its engines' reported counts and counts the requests it
has sent itself: a request still in transit to an engine counts as waiting there.
With data_parallel_size 1 every group is one engine and the cluster builds no balancer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class DataParallelBalancer:
    """Least-loaded choice inside each DP group of engines."""

    def __init__(self, instances: Sequence[Any], in_transit: np.ndarray):
        self.instances = instances
        self.in_transit = in_transit  # router-owned, always current
        members: dict[int, list[int]] = {}  # by position in ``instances`` (a cell's cluster numbers from 0)
        for i, inst in enumerate(instances):
            members.setdefault(inst.dp_group, []).append(i)
        self.group_of = [tuple(members[inst.dp_group]) for inst in instances]

    @staticmethod
    def needed(instances: Sequence[Any]) -> bool:
        """True when some configured instance has more than one engine."""
        groups = [inst.dp_group for inst in instances]
        return len(set(groups)) < len(groups)

    def load(self, i: int) -> tuple[int, int]:
        """Engine ``i``'s load as vLLM's balancer orders it: (4 x waiting + running, index)."""
        inst = self.instances[i]
        waiting = len(inst.waiting) + len(inst.landed) + len(inst.loading) + int(self.in_transit[i])
        return 4 * waiting + len(inst.running), i

    def pick(self, chosen: int) -> int:
        """The engine of ``chosen``'s DP group that receives the request."""
        group = self.group_of[chosen]
        if len(group) == 1:
            return chosen
        return min(self.load(i) for i in group)[1]
