"""The signal boards' one figure as a run's feature: summary.json's ``signals`` (scrapes, every board's)."""

from __future__ import annotations

from typing import Any

from distsim.feature import Feature, Measures


class SignalsFeature(Feature):
    name = "signals"

    def report(self, m: Measures) -> dict[str, Any]:
        return {"scrapes": sum(cluster.board.scrapes for cluster in m.parts.clusters)}
