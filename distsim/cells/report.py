"""Per-cell figures of a run with a cell layer (``cluster.cells.count`` > 1): the ``cell`` columns of
requests.parquet and instances.parquet, cells.parquet (one row per cell) and summary.json's ``cells``.
A run without cells gets none of them, so its outputs are those of a cluster without the layer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from distsim.metrics.summary import distribution, rnd

if TYPE_CHECKING:
    from distsim.cells.fleet import Fleet


def measure_cells(fleet: Fleet, requests: pd.DataFrame, instances: pd.DataFrame, span_s: float) -> tuple[dict[str, Any], pd.DataFrame]:
    """Add the cell columns to ``requests`` and ``instances`` (in place); return summary.json's ``cells``
    section and the per-cell table (a run without cells gets none of them)."""
    ids = np.frombuffer(fleet.record_ids, dtype=np.int64)
    cells = np.frombuffer(fleet.record_cells, dtype=np.int64)[np.argsort(ids, kind="stable")]
    requests.insert(requests.columns.get_loc("prefill_instance") + 1, "cell", cells)  # the table is in id order
    instances.insert(1, "cell", np.repeat(np.arange(len(fleet.cells)), [len(c.instances) for c in fleet.cells]))
    table = cell_table(fleet, requests, instances, span_s)
    routed = table["routed"].to_numpy()
    section = {
        "count": len(fleet.cells),
        "front_policy": fleet.settings.front_policy,
        "instances_per_cell": int(table["instances"].iloc[0]),
        "routed_max_share": rnd(routed.max() / routed.sum()) if routed.sum() else None,
        "spilled": int(table["spilled_out"].sum()),
        "kept_saturated": int(table["kept_saturated"].sum()),
        "summaries": fleet.directory.summaries,
        "per_cell": json_records(table),  # a list: results.parquet keeps it as one JSON column
    }
    return section, table


def json_records(table: pd.DataFrame) -> list[dict[str, object]]:
    """The table's rows as plain Python values, a missing figure (an idle cell's percentiles) as None:
    pandas holds None as NaN in a float column, which JSON cannot write."""
    return table.astype(object).where(table.notna(), None).to_dict(orient="records")


def cell_table(fleet: Fleet, requests: pd.DataFrame, instances: pd.DataFrame, span_s: float) -> pd.DataFrame:
    """cells.parquet: per cell its size, the front's round trip to it, what the front routed to it, the
    spill-over in and out, and its completed requests' latencies and GPU utilisation."""
    done = requests[requests["status"] == "completed"]
    by_cell = dict(tuple(done.groupby("cell", sort=True)))
    busy = (instances["busy_ms"] / 1e3 * instances["gpus"]).groupby(instances["cell"]).sum()
    gpus = instances["gpus"].groupby(instances["cell"]).sum()
    rows = []
    for c, cell in enumerate(fleet.cells):
        mine = by_cell.get(c, done.iloc[:0])
        ttft, e2e = distribution(mine["ttft_ms"].to_numpy()), distribution(mine["e2e_ms"].to_numpy())
        rows.append({
            "cell": c,
            "instances": len(cell.instances),
            "gpus": int(gpus[c]),
            "rtt_ms": rnd(fleet.network.front_rtt_us[c] / 1000.0),
            "routed": fleet.routed[c],
            "spilled_in": fleet.spilled_in[c],
            "spilled_out": fleet.spilled_out[c],
            "kept_saturated": fleet.kept_saturated[c],
            "accepted": cell.arrived,
            "completed": len(mine),
            "ttft_ms_mean": ttft["mean"],
            "ttft_ms_p99": ttft["p99"],
            "e2e_ms_mean": e2e["mean"],
            "e2e_ms_p99": e2e["p99"],
            "gpu_utilization": rnd(busy[c] / (gpus[c] * span_s)) if gpus[c] and span_s else 0.0,
        })
    return pd.DataFrame(rows)
