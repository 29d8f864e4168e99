"""P/D's feature: summary.json's ``kv_transfer`` (transfers, their mean time and the bytes moved), summed
over the clusters (one, or each cell's); with a P/D decider (policy.pd_decider), also the requests it
prefilled on their decode instance (``local_prefills``)."""

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
        out = {
            "transfers": transfers,
            "mean_ms": rnd(us_total / transfers / 1000.0) if transfers else None,
            "gb": rnd(sum(c.transfer_bytes_total for c in clusters) / 1e9, 6),
        }
        if any(c.decider is not None for c in clusters):
            out["local_prefills"] = sum(c.local_prefills for c in clusters)
        return out
