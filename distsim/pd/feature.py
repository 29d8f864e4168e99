"""P/D's feature: summary.json's ``kv_transfer`` (transfers, their mean time and the bytes moved), summed
over the clusters (one, or each cell's)."""

from __future__ import annotations

from typing import Any

from distsim.feature import Feature, Measures
from distsim.metrics.summary import rnd


class TransferFeature(Feature):
    name = "kv_transfer"

    def report(self, m: Measures) -> dict[str, Any]:
        clusters = m.parts.clusters
        transfers = sum(c.transfers for c in clusters)
        us_total = sum(c.transfer_us_total for c in clusters)
        return {
            "transfers": transfers,
            "mean_ms": rnd(us_total / transfers / 1000.0) if transfers else None,
            "gb": rnd(sum(c.transfer_bytes_total for c in clusters) / 1e9, 6),
        }
