"""The registry of service curves (``cluster.pools[i].runtime.curve.kind``), apart from their interface in
base.py: a curve is a factory ``(cfg, CurveContext) -> ServiceCurve`` decorated with ``@CURVES.register``."""

from __future__ import annotations

from distsim.registry import Registry

CURVES: Registry = Registry("service curve", "cluster.pools[i].runtime.curve.kind", "distsim.runtime.curves")
