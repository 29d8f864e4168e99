"""Hedging's figures: the request columns (copies, the winning copy, wasted work) and summary.json's
``hedging`` section, from the hedgers' books (distsim.cluster.hedging) and the instances' counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.cluster.hedging import hedging_columns
from distsim.metrics.columns import Table
from distsim.metrics.summary import rnd

if TYPE_CHECKING:
    from distsim.cluster.hedging import Hedger
    from distsim.instance.instance import Instance


def gpu_seconds_per_token(instances: Sequence[Instance], fractions: list[float] | None = None) -> dict[int, tuple[float, float]]:
    """Each instance's GPU-seconds per prefill token and per decode token: every step's time split among
    its tokens equally (so a 2,048-token chunk beside 8 decoders takes most of its step), summed over the
    run by phase, over the tokens of that phase. The price of a cancelled copy's work. ``fractions``: each
    instance's share of a GPU (MIG slices; None: whole GPUs)."""
    rates = {}
    for i, inst in enumerate(instances):
        s = inst.stats
        gpus = inst.gpus * (fractions[i] if fractions else 1.0)
        prefill_s = s.prefill_busy_us / 1e6 * gpus
        decode_s = (s.busy_us - s.prefill_busy_us) / 1e6 * gpus
        rates[inst.index] = (
            prefill_s / s.prefill_tokens if s.prefill_tokens else 0.0,
            decode_s / s.decode_tokens if s.decode_tokens else 0.0,
        )
    return rates


def add_hedging(table: Table, instances: Table, hedgers: list[Hedger], engines: Sequence[Instance]) -> dict[str, Any]:
    """Add the hedging columns to the request table; return the summary section (over the measured rows
    when a measurement window marks them)."""
    fractions = list(instances["gpu_fraction"]) if "gpu_fraction" in instances else None  # MIG slices
    columns = hedging_columns(hedgers, table["request_id"], gpu_seconds_per_token(engines, fractions))
    for name, values in columns.items():
        table.add(name, values, "float64" if name == "wasted_gpu_s" else "int64")
    rows = table["measured"] if "measured" in table else np.ones(len(table), dtype=bool)
    copies, winner = table["copies"][rows], table["hedge_winner"][rows]
    hedged = copies > 1
    n_hedged = int(hedged.sum())
    gpus = instances["gpus"] * instances["gpu_fraction"] if fractions else instances["gpus"]
    busy_gpu_s = float(np.dot(instances["busy_ms"] / 1000.0, gpus))
    wasted_gpu_s = float(table["wasted_gpu_s"][rows].sum())
    return {
        "requests": int(rows.sum()),
        "hedged": n_hedged,
        "hedge_rate": rnd(n_hedged / rows.sum()) if rows.any() else None,
        "copies_sent": int((copies - 1).sum()),
        "wins": {
            "original": int((hedged & (winner == 0)).sum()),
            "hedge": int((hedged & (winner > 0)).sum()),
            "none": int((hedged & (winner < 0)).sum()),
        },
        "wasted_prefill_tokens": int(table["wasted_prefill_tokens"][rows].sum()),
        "wasted_decode_tokens": int(table["wasted_decode_tokens"][rows].sum()),
        "wasted_gpu_s": rnd(wasted_gpu_s),
        "wasted_gpu_fraction": rnd(wasted_gpu_s / busy_gpu_s, 6) if busy_gpu_s else None,
    }
