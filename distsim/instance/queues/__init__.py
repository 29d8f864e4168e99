"""Waiting-queue orders for an instance (``cluster.engine.scheduler``), one module each.

A queue offers append (a new arrival), appendleft (a preempted request goes back to the front, as in
vLLM), peek, popleft, remove (a cancelled request) and len. FCFS is a deque; other orders are small heaps (see :mod:`.keyed`).
"""

from distsim.instance.queues.registry import QUEUES

__all__ = ["QUEUES"]
