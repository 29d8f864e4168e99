"""SLO classes whose SLO allows shedding (``workload.slo.classes[i].sheddable``), as the Gateway API
inference extension's Sheddable criticality: a request of such a class that admission sheds (rejected
before any instance saw it) is what its SLO allows, so the capacity fitness does not count it as a miss.
Every other rejected, dropped or late request still is, so shedding a class that may not be shed is never
free. summary.json's ``sheddable`` section: the classes, the requests of theirs shed, and the SLO
attainment with those counted as met, over the measured requests; capacity reads that attainment."""

from __future__ import annotations

from typing import Any

import numpy as np

from distsim.feature import Feature, Measures
from distsim.metrics.summary import is_status, rnd
from distsim.request import Request, Status


def shed_allowed(req: Request, sheddable: frozenset[str]) -> bool:
    """Whether ``req`` was shed by admission and its class allows that (a request the engine refused as too
    long carries its instance: not shed)."""
    return req.status == Status.REJECTED and req.instance < 0 and req.slo_class in sheddable


class SheddingFeature(Feature):
    name = "sheddable"

    def report(self, m: Measures) -> dict[str, Any]:
        sheddable = m.parts.slo.sheddable
        table = m.table
        rows = table["measured"] if "measured" in table else np.ones(len(table["met_slo"]), dtype=bool)
        shed = rows & is_status(table, "rejected") & (table["instance"] < 0) & np.isin(table["slo_class"], list(sheddable))
        n = int(rows.sum())
        met = int((table["met_slo"] & rows).sum())
        return {
            "classes": sorted(sheddable),
            "shed": int(shed.sum()),
            "slo_attainment": rnd((met + int(shed.sum())) / n) if n else None,
        }
