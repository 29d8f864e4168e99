"""Policy interfaces and registries.

Policies read a read-only view of the cluster (see distsim.cluster.view) and return decisions; they
never reach into an instance. A policy draws randomness only from its own stream in the context.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distsim.registry import Registry
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


ROUTERS: Registry[type[Router]] = Registry("routing policy", "policy.routing.kind")
ADMISSIONS: Registry[type[Admission]] = Registry("admission policy", "policy.admission.kind")

_loaded = False


def load_builtin_policies() -> None:
    """Import every module under distsim.policies so their registrations run."""
    global _loaded
    if _loaded:
        return
    import distsim.policies as pkg

    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(mod.name)
    _loaded = True
