"""The registry of the weighted router's scorers, apart from their interface in base.py.

A scorer is one module of this package with ``@SCORERS.register("name")`` on its class; the first
lookup imports every module of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only: base.py imports this module
    from distsim.policies.scorers.base import Scorer

SCORERS: Registry[type[Scorer]] = Registry("scorer", "policy.routing.scorers", "distsim.policies.scorers")
