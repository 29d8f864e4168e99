"""Hedging's feature: refuses what it cannot compose with, and reports its request columns and
summary.json's ``hedging`` from the clusters' hedgers (distsim.hedging.report)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from distsim.cluster.cluster import ClusterListener
from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts

if TYPE_CHECKING:
    from distsim.request import Request
    from distsim.timeline.trace import Timeline


class HedgingFeature(Feature):
    name = "hedging"

    def __init__(self) -> None:
        self.parts: Parts | None = None

    @staticmethod
    def check(scenario: Any) -> None:
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
        """With a timeline, each copy's flow is written into it as the copy is sent."""
        self.parts = parts
        timeline = parts.features.get("timeline")
        if timeline is not None:
            for cluster in parts.clusters:
                cluster.listeners.append(HedgeTrace(timeline.timeline))

    @property
    def hedgers(self) -> list:
        assert self.parts is not None
        return [cluster.hedger for cluster in self.parts.clusters if cluster.hedger is not None]

    def report(self, m: Measures) -> dict[str, Any]:
        from distsim.hedging.report import add_hedging

        return add_hedging(m.table, m.instances, self.hedgers, m.parts.world.instances)


class HedgeTrace(ClusterListener):
    """Hedging's records in the timeline: a flow per copy, from the instance of the request's first copy to
    the copy's, at the hedge."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline

    def hedged(self, now: int, req: Request, copy: Request, source: int, target: int) -> None:
        if self.timeline.inside(now):
            rid, cid = req.request_id, copy.request_id
            self.timeline.flow("hedging", "hedge", "hedge", source, target, now, now,
                               {"request": rid, "copy": cid, "to_instance": target},
                               {"request": rid, "copy": cid, "from_instance": source})
