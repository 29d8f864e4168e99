"""The cell layer as a run's feature: it builds the world (the fleet of cells, distsim.cells.build) in
place of the one cluster, and reports the ``cell`` columns, cells.parquet and summary.json's ``cells``
(distsim.cells.report)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distsim.feature import Feature, Measures, Parts
from distsim.instance.instance import Instance

if TYPE_CHECKING:
    import pandas as pd

    from distsim.cells.fleet import Fleet
    from distsim.request import Request
    from distsim.timeline.trace import Timeline

FRONT_TID, SPILL_TID = 1, 2  # the timeline's cluster process: the front router's picks, spill-overs


class CellsFeature(Feature):
    name = "cells"

    def __init__(self) -> None:
        self.fleet: Fleet | None = None
        self.table: pd.DataFrame | None = None

    def build(self, parts: Parts) -> bool:
        from distsim.cells.build import (
            build_fleet,  # looked up at call time (scripts/bench_cells.py times it)
        )

        self.fleet = build_fleet(
            parts.pools, parts.policy, parts.signals, parts.transfer, parts.loop, parts.recorder, seed=parts.seed,
            fast_forward=parts.fast_forward, slo=parts.slo, frontend=parts.frontend, cells=parts.cells,
            instance_cls=parts.instance_cls or Instance,
        )
        parts.world, parts.clusters = self.fleet, list(self.fleet.cells)
        return True

    def attach(self, parts: Parts) -> None:
        """With a timeline, the front's picks and spill-overs are written into it as they happen."""
        timeline = parts.features.get("timeline")
        if timeline is not None:
            assert self.fleet is not None
            self.fleet.listeners.append(FrontTrace(timeline.timeline))

    def report(self, m: Measures) -> dict[str, Any]:
        """The cell columns go into the DataFrames (the tables become pandas here)."""
        from distsim.cells.report import measure_cells

        assert self.fleet is not None
        m.table, m.instances = m.table.to_pandas(), m.instances.to_pandas()
        section, self.table = measure_cells(self.fleet, m.table, m.instances, m.summary["_derived"]["span_s"])
        return section

    def outputs(self, m: Measures) -> dict[str, Any]:
        return {"cells": self.table}


class FrontTrace:
    """The cells' records in the timeline: the front router's picks and the spill-overs, as instants on the
    cluster process (told by the fleet: its ``listeners``)."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline

    def front_routed(self, now: int, req: Request, cell: int) -> None:
        if self.timeline.inside(now):
            self.timeline.instant("cells", f"route to cell {cell}", "front", now, FRONT_TID, "front router",
                                  {"request": req.request_id, "cell": cell})

    def spilled(self, now: int, req: Request, cell: int, target: int) -> None:
        if self.timeline.inside(now):
            self.timeline.instant("cells", f"spill cell {cell} to {target}", "front", now, SPILL_TID, "spill-over",
                                  {"request": req.request_id, "from_cell": cell, "to_cell": target})
