"""MIG's feature: the slice columns of instances.parquet (a vLLM pool on slices; a runtime pool's slices
add theirs with the runtimes' rows, distsim.runtime.report) and summary.json's ``mig``."""

from __future__ import annotations

from typing import Any

from distsim.cluster.mig import slice_columns
from distsim.feature import Feature, Measures


class MigFeature(Feature):
    name = "mig"

    def instance_columns(self, m: Measures) -> None:
        pool_of = m.parts.world.pool_of
        if any(pool.mig is not None for pool in pool_of):  # per slice price and share
            for name, values in slice_columns(pool_of).items():
                m.instances.add(name, values, _KINDS.get(name, "int64"))

    def report(self, m: Measures) -> dict[str, Any] | None:
        if "mig_profile" not in m.instances:
            return None
        from distsim.mig.report import mig_summary

        return mig_summary(m.parts.world, m.instances)


_KINDS = {"price_usd_per_gpu_hour": "float64", "mig_profile": "str", "gpu_fraction": "float64"}
