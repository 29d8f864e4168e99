"""Policy interfaces and registries.

Policies read a read-only view of the cluster (see distsim.signals.view) and return decisions; they
never reach into an instance. A policy draws randomness only from its own stream in the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from distsim.policies.registry import ADMISSIONS, ROUTERS  # noqa: F401  (re-exported: policies register here)
from distsim.request import Request

if TYPE_CHECKING:
    from distsim.signals.view import ClusterView


@dataclass
class PolicyContext:
    """What a policy may be built from."""

    num_instances: int
    rng: np.random.Generator  # the policy's own stream ("router", "router/decode", "admission")
    seed: int
    extra: dict[str, float] = field(default_factory=dict)  # e.g. default_ttft_slo_ms


@dataclass(frozen=True)
class PolicyParams:
    """A policy's own parameters: the keys of ``policy.routing`` or ``policy.admission`` besides kind
    and latency_ms. A policy with parameters declares a subclass (typed fields, None meaning "the
    policy's default") as its ``Params``; the config schema offers the union of all policies' fields,
    so a new policy with parameters is one file and one YAML. ``check`` validates the values, naming
    ``key.field`` (key: "policy.routing" or "policy.admission")."""

    def check(self, key: str) -> None:
        return None

    @classmethod
    def from_node(cls, node: Mapping[str, object] | None) -> PolicyParams:
        """The parameters from a config node; absent or null keys keep their defaults."""
        values = {}
        for f in fields(cls):
            value = node.get(f.name) if node is not None else None
            if value is not None:
                values[f.name] = dict(value) if hasattr(value, "items") else value
        return cls(**values)


class Policy:
    """What routers and admission policies share: parameters, a context, and the membership hook."""

    Params: ClassVar[type[PolicyParams]] = PolicyParams
    reads_signals: bool = False  # reads instance-reported signals (the board then has instances push them live)

    def __init__(self, params: PolicyParams, ctx: PolicyContext):
        self.params = params
        self.ctx = ctx

    def members_changed(self, old: np.ndarray, new: np.ndarray) -> None:
        """The view's candidates changed from ``old`` to ``new`` (global instance indices, ascending), as
        autoscaling starts or stops replicas. Never called without autoscaling. A policy that keeps state
        per candidate position remaps it here (see :func:`positions`); this base keeps
        ``ctx.num_instances`` equal to the view's ``n``."""
        self.ctx.num_instances = int(new.size)


def positions(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """For each position among the ``old`` candidates, its position among the ``new`` (-1: gone)."""
    where = np.searchsorted(new, old)
    found = (where < new.size) & (new[np.minimum(where, new.size - 1)] == old)
    return np.where(found, where, -1)


class Router(Policy):
    """Chooses the instance for an admitted request."""

    uses_prefix_index: ClassVar[bool] = False  # the cluster keeps a prefix index for it
    last_scores: np.ndarray | None = None  # a scoring router's scores of its last decision, by view position

    @classmethod
    def reads_prefix_index(cls, params: PolicyParams) -> bool:
        """Whether the router with these parameters scores the router-side prefix index."""
        return cls.uses_prefix_index

    def route(self, req: Request, view: ClusterView) -> int:
        raise NotImplementedError


class Admission(Policy):
    """Admits or rejects a request as it enters the cluster."""

    def admit(self, req: Request, now: int, view: ClusterView) -> bool:
        raise NotImplementedError
