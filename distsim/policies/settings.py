"""A routing or admission policy's config node checked into a :class:`PolicyChoice` (resolve, then build).

The registered class comes from its registry (distsim.policies.registry); its parameters are its own
``Params`` (distsim.policies.base.PolicyParams), which check themselves; keys the chosen policy does not
read are warned about. The cluster's policy section (distsim.cluster.settings) holds one choice for routing
and one for admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from distsim.registry import Registry
from distsim.validators import ms_to_us, warn_unread

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.policies.base import Policy, PolicyParams

P = TypeVar("P", bound="Policy")  # the family: a Router, or an Admission


@dataclass(frozen=True)
class PolicyChoice(Generic[P]):
    """A routing or admission policy: its registered class, its checked parameters, and the time its
    decision adds before a request reaches an instance."""

    kind: str
    cls: type[P]  # the registered class
    params: PolicyParams  # an instance of cls.Params
    latency_us: int = 0


def policy_choice(node: DictConfig, key: str, registry: Registry[type[P]]) -> PolicyChoice[P]:
    """``policy.routing`` or ``policy.admission`` (``key``): the class ``kind`` names, its checked parameters,
    and the decision's latency."""
    cls = registry.get(node.kind)
    params = cls.Params.from_node(node)
    params.check(key)
    own = {"kind", "latency_ms", *cls.Params.__dataclass_fields__}
    warn_unread(node, key, own, f"the {registry.family} {node.kind!r} does not use it")
    return PolicyChoice(node.kind, cls, params, ms_to_us(f"{key}.latency_ms", node.latency_ms))
