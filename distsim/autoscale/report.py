"""Autoscaling's outputs: summary.json's ``autoscale`` section and instances_timeline.parquet.

Per pool: the replicas started and stopped (drained, or cancelled while provisioning), the mean and peak
replicas paid for (provisioning, serving or draining), GPU-hours and dollars, all over the run's span (first
arrival to end), the same span the rest of the summary's cost uses. The timeline has one row per change of a
pool: its replicas by state and the count its scaler wanted (clamped to min and max; stabilisation may hold
the pool above it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.metrics.columns import Table
from distsim.metrics.summary import rnd

if TYPE_CHECKING:
    from distsim.autoscale.controller import Autoscaler


def autoscale_summary(autoscaler: Autoscaler, instances: Table, start_us: int, end_us: int) -> dict[str, Any]:
    span_s = max(end_us - start_us, 1) / 1e6
    gpus = instances["gpus"].astype(np.float64)
    price = instances["price_usd_per_gpu_hour"]
    pools = {}
    for sp in autoscaler.pools:
        billed = sp.replicas.billed_us(start_us, end_us)
        engines = np.array(sorted(billed), dtype=np.int64)
        seconds = np.array([billed[e] for e in engines], dtype=np.float64) / 1e6
        replica_s = seconds.sum() / sp.spec.data_parallel_size
        pools[sp.spec.name] = {
            "kind": sp.settings.kind,
            "min": sp.settings.min_replicas,
            "max": sp.settings.max_replicas,
            "initial": sp.spec.count,
            "provision_s": rnd(sp.settings.provision_us / 1e6),
            "scale_ups": sp.ups,
            "scale_downs": sp.downs,
            "mean_replicas": rnd(replica_s / span_s),
            "peak_replicas": max(s + p + d for _, s, p, d, _ in sp.replicas.timeline),
            "gpu_hours": rnd(float(np.dot(gpus[engines], seconds)) / 3600.0, 6),
            "cost_usd": rnd(float(np.dot(gpus[engines] * price[engines], seconds)) / 3600.0, 6),
        }
    return {"pools": pools}


def timeline_table(autoscaler: Autoscaler) -> Table:
    """instances_timeline.parquet: one row per change of an autoscaled pool, in time order."""
    rows = sorted(
        (t, i, sp.spec.name, s, p, d, want)
        for i, sp in enumerate(autoscaler.pools)
        for t, s, p, d, want in sp.replicas.timeline
    )
    table = Table()
    table.add("time_ms", np.array([r[0] for r in rows], dtype=np.float64) / 1000.0, "float64")
    table.add("pool", [r[2] for r in rows], "str")
    for j, name in enumerate(("serving", "provisioning", "draining", "desired")):
        table.add(name, np.array([r[3 + j] for r in rows], dtype=np.int64), "int64")
    return table
