"""The registries of routing and admission policies, apart from their interfaces in base.py.

A policy is one module of this package with ``@ROUTERS.register("name")`` or
``@ADMISSIONS.register("name")`` on its class; the first lookup imports every module of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only: base.py imports this module
    from distsim.policies.base import Admission, Router

ROUTERS: Registry[type[Router]] = Registry("routing policy", "policy.routing.kind", "distsim.policies")
ADMISSIONS: Registry[type[Admission]] = Registry("admission policy", "policy.admission.kind", "distsim.policies")
