"""Policy interfaces and registries.

Policies read a read-only view of the cluster (see distsim.signals.view) and return decisions; they
never reach into an instance. A policy draws randomness only from its own stream in the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from distsim.errors import ConfigError
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

    def metrics(self) -> Mapping[str, Any] | None:
        """The policy's own figures for summary.json's ``policy.metrics`` (finite numbers by name, or a dict
        of them), or None. Called once, after the run, and only where a class overrides it."""
        return None


def reports_metrics(cls: type[Policy]) -> bool:
    """Whether a policy class has figures of its own (overrides :meth:`Policy.metrics`)."""
    return cls.metrics is not Policy.metrics


def positions(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """For each position among the ``old`` candidates, its position among the ``new`` (-1: gone)."""
    where = np.searchsorted(new, old)
    found = (where < new.size) & (new[np.minimum(where, new.size - 1)] == old)
    return np.where(found, where, -1)


class Route(NamedTuple):
    """A routing decision with a priority: ``route`` may return this instead of a plain position. The
    request's ``priority`` for its engine becomes the router's (the ``priority`` scheduler,
    ``cluster.engine.scheduler=priority``, serves higher first, FCFS within a priority, as it does the
    workload's SLO-class priorities); other schedulers ignore it. A plain position leaves the request's
    own priority as the workload gave it."""

    target: int  # the chosen candidate's position in the view
    priority: int


def target_of(choice: int | Route) -> int:
    """The candidate position of what ``route`` returned (a plain position or a :class:`Route`)."""
    return choice.target if choice.__class__ is Route else choice


def routed_priority(router: Router, value: object) -> int:
    """A :class:`Route`'s priority as the request's; anything but an integer is one error naming the router."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise ConfigError("policy.routing", f"{type(router).__name__}.route returned a priority of {value!r}: a Route's priority is an integer")


class Router(Policy):
    """Chooses the instance for an admitted request."""

    uses_prefix_index: ClassVar[bool] = False  # the cluster keeps a prefix index for it
    last_scores: np.ndarray | None = None  # a scoring router's scores of its last decision, by view position

    @classmethod
    def reads_prefix_index(cls, params: PolicyParams) -> bool:
        """Whether the router with these parameters scores the router-side prefix index."""
        return cls.uses_prefix_index

    def route(self, req: Request, view: ClusterView) -> int | Route:
        """The chosen candidate's position in ``view`` (or a :class:`Route` with a priority as well)."""
        raise NotImplementedError


class Admission(Policy):
    """Admits or rejects a request as it enters the cluster."""

    def admit(self, req: Request, now: int, view: ClusterView) -> bool:
        raise NotImplementedError
