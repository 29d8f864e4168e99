"""The registry of front routers (``cluster.cells.front_policy``), apart from their interface in base.py.

A front router is one module of distsim/cells/front with ``@FRONTS.register("name")`` on its class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only
    from distsim.cells.base import FrontRouter

FRONTS: Registry[type[FrontRouter]] = Registry("front router", "cluster.cells.front_policy", "distsim.cells.front")
