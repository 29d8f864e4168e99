"""The registry of latency models (``cluster.latency.kind``), apart from the interface in base.py.

A model is a factory ``(cfg, LatencyContext) -> LatencyModel`` decorated with
``@LATENCY_MODELS.register("kind")`` in a module of this package; the first lookup imports them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only: build.py imports this module
    from distsim.instance.latency.base import LatencyFactory

LATENCY_MODELS: Registry[LatencyFactory] = Registry("latency model", "cluster.latency.kind", "distsim.instance.latency")
register_latency_model = LATENCY_MODELS.register
