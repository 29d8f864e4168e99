"""Policy interfaces and registries.

Policies read a read-only view of the cluster (see distsim.cluster.view) and return decisions; they
never reach into an instance. A policy draws randomness only from its own stream in the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distsim.policies.registry import ADMISSIONS, ROUTERS
from distsim.request import Request


@dataclass
class PolicyContext:
    """What a policy may be built from."""

    num_instances: int
    rng: np.random.Generator  # the policy's own stream ("router", "router/decode", "admission")
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. default_ttft_slo_ms


class Router:
    """Chooses the instance for an admitted request."""

    def __init__(self, cfg: Any, ctx: PolicyContext):
        self.cfg = cfg
        self.ctx = ctx

    def route(self, req: Request, view: Any) -> int:
        raise NotImplementedError


class Admission:
    """Admits or rejects a request as it enters the cluster."""

    def __init__(self, cfg: Any, ctx: PolicyContext):
        self.cfg = cfg
        self.ctx = ctx

    def admit(self, req: Request, now: int, view: Any) -> bool:
        raise NotImplementedError


def load_builtin_policies() -> None:
    """Kept for callers from before discovery: the registries now import their members on first lookup."""
    ROUTERS.discover()
    ADMISSIONS.discover()
