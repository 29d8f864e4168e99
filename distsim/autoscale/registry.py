"""The registry of autoscaler kinds, apart from their interface (base.py): one module per kind in
distsim/autoscale/kinds with ``@SCALERS.register("name")``; the first lookup imports them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only: base.py does not import this module's members
    from distsim.autoscale.base import Scaler

SCALERS: Registry[type[Scaler]] = Registry("autoscaler kind", "cluster.autoscale.kind", "distsim.autoscale.kinds")
