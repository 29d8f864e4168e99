"""Hedging's feature: refuses what it cannot compose with, and reports its request columns and
summary.json's ``hedging`` from the clusters' hedgers (distsim.hedging.report)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts

if TYPE_CHECKING:
    from distsim.resolve import Scenario


class HedgingFeature(Feature):
    name = "hedging"

    def __init__(self) -> None:
        self.parts: Parts | None = None

    @staticmethod
    def check(scenario: Scenario) -> None:
        """Hedging copies a request onto another instance of a mixed cluster: P/D is refused (a copy would
        need a pair of instances and a transfer to cancel), and one engine leaves nowhere to copy to. A delay
        in SLO fractions needs a finite TTFT SLO."""
        hedge, pools = scenario.policy.hedge, scenario.pools
        if hedge.slo_fraction is not None and not math.isfinite(scenario.slo.ttft_ms):
            raise ConfigError(
                "policy.hedge.delay_slo_fraction",
                "needs a TTFT SLO: set workload.slo.ttft_ms (or give policy.hedge.delay_ms instead)",
            )
        if any(p.role != "mixed" for p in pools):
            raise ConfigError("policy.hedge", "hedging needs mixed pools; P/D disaggregation (prefill and decode pools) is not supported")
        if sum(p.count * p.data_parallel_size for p in pools) < 2:
            raise ConfigError("policy.hedge", "hedging needs at least two instances to copy a request to")

    def attach(self, parts: Parts) -> None:
        self.parts = parts

    @property
    def hedgers(self) -> list:
        assert self.parts is not None
        return [cluster.hedger for cluster in self.parts.clusters if cluster.hedger is not None]

    def report(self, m: Measures) -> dict[str, Any]:
        from distsim.hedging.report import add_hedging

        return add_hedging(m.table, m.instances, self.hedgers, m.parts.world.instances)
