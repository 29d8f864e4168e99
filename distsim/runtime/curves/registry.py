"""The registry of service curves (``cluster.pools[i].runtime.curve.kind``), apart from their interface in
base.py: a curve is a factory ``(cfg, CurveContext) -> ServiceCurve`` decorated with ``@CURVES.register``."""

from __future__ import annotations

from distsim.registry import Registry

CURVES: Registry = Registry("service curve", "cluster.pools[i].runtime.curve.kind", "distsim.runtime.curves")

# the keys each built-in curve reads besides ``kind`` (the others must stay null)
READS = {
    "fixed": ("batch_ms",),
    "table": ("batch_sizes", "sizes", "ms"),
    "roofline": ("compute_efficiency", "memory_efficiency", "overhead_ms"),
}
