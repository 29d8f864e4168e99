"""Autoscaling as a run's feature: the LLM pools' autoscaler attached to the cluster at build time (a
runtime pool's joins it once the request types' front is built: distsim.runtime.feature), the fleet
billed for the replicas that ran, summary.json's ``autoscale`` and instances_timeline.parquet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distsim.autoscale.controller import attach_autoscaler
from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts

if TYPE_CHECKING:
    import numpy as np

    from distsim.autoscale.controller import Autoscaler


class AutoscaleFeature(Feature):
    name = "autoscale"

    def __init__(self) -> None:
        self.parts: Parts | None = None

    @staticmethod
    def check(scenario: Any) -> None:
        """Not composed with cells: each cell's share of a pool would scale on its own. Refused, naming the key.
        (A measurement window is fine: distsim.metrics.window bills the replicas within it.)"""
        scaled = next((pool for pool in scenario.pools if pool.autoscale is not None), None)
        if scaled is not None and scenario.cells.enabled:
            raise ConfigError(
                f"{scaled.autoscale.key}.kind",
                f"autoscaling is not supported with cells (cluster.cells.count = {scenario.cells.count}); set it to 1",
            )

    def attach(self, parts: Parts) -> None:
        """Built with max replicas; from now only ``count`` of each autoscaled LLM pool serve."""
        self.parts = parts
        if any(pool.autoscale is not None for pool in parts.pools):
            lag_us = parts.frontend.output_lag_us if parts.frontend is not None else 0
            attach_autoscaler(parts.clusters[0], list(parts.pools), parts.seed, ttft_slo_ms=parts.slo.ttft_ms,
                              output_lag_us=lag_us)

    @property
    def autoscaler(self) -> Autoscaler:
        assert self.parts is not None
        return self.parts.clusters[0].autoscaler  # the LLM pools', or the one a runtime pool made

    def billing(self, start_us: int, end_us: int) -> np.ndarray:
        return self.autoscaler.billed_s(start_us, end_us)  # cost follows the replicas that ran

    def report(self, m: Measures) -> dict[str, Any]:
        from distsim.autoscale.report import autoscale_summary

        return autoscale_summary(self.autoscaler, m.instances, m.start_us, m.stop_us)

    def outputs(self, m: Measures) -> dict[str, Any]:
        from distsim.autoscale.report import timeline_table

        return {"timeline": timeline_table(self.autoscaler)}

    def check_invariants(self) -> None:
        self.autoscaler.check_invariants()
