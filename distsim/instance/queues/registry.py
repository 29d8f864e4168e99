"""The registry of waiting-queue orders: ``@QUEUES.register("name")`` on a class with no arguments."""

from __future__ import annotations

from collections.abc import Callable

from distsim.registry import Registry

QUEUES: Registry[Callable[[], object]] = Registry("scheduler", "cluster.engine.scheduler", "distsim.instance.queues")
