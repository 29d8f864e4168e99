"""Outputs of request types and runtimes, only when they are in play (so LLM-only outputs are unchanged).

- :class:`TypedRecorder`: the request table gains ``type``, ``items``, ``size`` and ``latency_slo_ms``; a
  non-LLM row has no tokens, no first token (TTFT and TPOT null) and no TTFT/TPOT SLO; its ``e2e_ms`` is
  its latency and it meets its SLO when completed within ``latency_slo_ms`` (none: when completed).
- :func:`types_summary`: summary.json's ``types``: per type, counts, SLO attainment, latency and queueing
  percentiles, throughput, and for runtime-served types the batches (items per batch).
- :func:`runtime_rows`: instances.parquet's rows for runtime replicas and the batch columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.metrics.columns import Table
from distsim.metrics.recorder import Recorder
from distsim.metrics.summary import distribution, is_status, rnd
from distsim.request import Request

if TYPE_CHECKING:
    from distsim.cluster.mig import MigSlices
    from distsim.runtime.batcher import Batch
    from distsim.runtime.replica import RuntimeReplica


class TypedRecorder(Recorder):
    __slots__ = ("typed",)

    def __init__(self, default_ttft_slo_ms: float, default_tpot_slo_ms: float, output_lag_us: int = 0):
        super().__init__(default_ttft_slo_ms, default_tpot_slo_ms, output_lag_us)
        self.typed: dict[int, tuple[str, int, float, float | None]] = {}  # non-LLM requests by id

    def done(self, req: Request) -> None:
        super().done(req)
        if req.rtype != "llm":
            self.typed[req.request_id] = (req.rtype, req.items, req.size, req.latency_slo_ms)

    def columns(self) -> Table:
        t = super().columns()
        ids = t["request_id"]
        n = len(ids)
        kind = np.array(["llm"] * n, dtype=object)
        items = np.zeros(n, dtype=np.int64)
        size = np.zeros(n, dtype=np.float64)
        slo = np.full(n, np.nan)
        rows = np.flatnonzero(np.isin(ids, np.fromiter(self.typed, dtype=np.int64, count=len(self.typed))))
        for row in rows:
            kind[row], items[row], size[row], s = self.typed[int(ids[row])]
            slo[row] = np.nan if s is None else s
        typed = kind != "llm"
        done = is_status(t, "completed")
        met = np.where(typed, done & (np.isnan(slo) | (np.nan_to_num(t["e2e_ms"], nan=np.inf) <= np.nan_to_num(slo, nan=np.inf))), t["met_slo"])
        for name in ("ttft_slo_ms", "tpot_slo_ms"):
            t.add(name, np.where(typed, np.nan, t[name]), "float64")
        t.add("met_slo", met, "bool")
        t.add("type", kind.tolist(), "string").add("items", items, "int64").add("size", size, "float64")
        return t.add("latency_slo_ms", slo, "float64")


def _batches(runtimes: Sequence[RuntimeReplica], name: str, ended_in: tuple[int, int] | None) -> list[Batch]:
    batches = [b for r in runtimes if r.serves == name for b in r.batches]
    if ended_in is None:
        return batches
    low, high = ended_in
    return [b for b in batches if low < b.end_us <= high]


def types_summary(requests: Table, runtimes: Sequence[RuntimeReplica], span_s: float, ended_in: tuple[int, int] | None = None) -> dict[str, Any]:
    """summary.json's ``types``, one entry per type in name order. ``ended_in`` (a measurement window's
    (start, end] in microseconds): only the batches ending inside it; None: every batch started."""
    kinds = requests["type"]
    done = is_status(requests, "completed")
    out: dict[str, Any] = {}
    for name in sorted(set(kinds.tolist())):
        mine = kinds == name
        n = int(mine.sum())
        entry: dict[str, Any] = {
            "requests": n,
            "completed": int((mine & done).sum()),
            "dropped": int((mine & is_status(requests, "dropped")).sum()),
            "unfinished": int((mine & is_status(requests, "unfinished")).sum()),
            "slo_attainment": rnd(int(requests["met_slo"][mine].sum()) / n) if n else None,
            "latency_ms": distribution(requests["e2e_ms"][mine & done]),
            "queue_ms": distribution(requests["queue_ms"][mine]),
            "throughput": {"requests_per_s": rnd(int((mine & done).sum()) / span_s)},
        }
        if name == "llm":
            entry["ttft_ms"] = distribution(requests["ttft_ms"][mine & done])
        else:
            entry["throughput"]["items_per_s"] = rnd(int(requests["items"][mine & done].sum()) / span_s)
            batches = _batches(runtimes, name, ended_in)
            entry["batches"] = {
                "count": len(batches),
                "items": distribution(np.array([b.items for b in batches], dtype=np.float64)),
                "requests": distribution(np.array([len(b.requests) for b in batches], dtype=np.float64)),
                "full_share": rnd(sum(b.full for b in batches) / len(batches)) if batches else None,
            }
        out[str(name)] = entry
    return out


def _slices(runtimes: Sequence[RuntimeReplica]) -> list[tuple[MigSlices, int] | None]:
    """Each replica's (pool's MIG slices, its slice number), None on a whole GPU."""
    seen: dict[str, int] = {}
    out = []
    for r in runtimes:
        k = seen[r.pool.name] = seen.get(r.pool.name, -1) + 1
        out.append(None if r.pool.mig is None else (r.pool.mig, k))
    return out


def _with_mig_columns(table: Table) -> Table:
    """The LLM instances' table with the MIG columns of whole GPUs (a runtime pool is sliced, no vLLM pool is)."""
    n = len(table)
    table.add("mig_profile", [""] * n, "str").add("mig_gpu", [-1] * n, "int64")
    return table.add("gpu_fraction", [1.0] * n, "float64")


def runtime_rows(table: Table, runtimes: Sequence[RuntimeReplica]) -> Table:
    """instances.parquet with a row per runtime replica after the LLM instances' (their LLM counters 0) and the
    batch columns (0 on LLM rows): batches, batched items, the largest batch, and requests dropped as too big.
    A replica on a MIG slice is billed its share of the GPU, as a vLLM instance on one is."""
    n_llm = len(table)
    slices = _slices(runtimes)
    if any(slices) and "gpu_fraction" not in table:
        table = _with_mig_columns(table)
    rows = {
        "instance": [r.index for r in runtimes], "pool": [r.pool.name for r in runtimes], "role": ["runtime"] * len(runtimes),
        "hardware": [r.pool.hardware.name for r in runtimes], "gpus": [r.pool.gpus for r in runtimes],
        "price_usd_per_gpu_hour": [s[0].gpu_price_usd_per_hour * s[0].share[s[1]] if s else float(r.pool.hardware.price_usd_per_gpu_hour)
                                   for r, s in zip(runtimes, slices)],
        "mig_profile": [s[0].profile.name if s else "" for s in slices],
        "mig_gpu": [s[0].gpu[s[1]] if s else -1 for s in slices],
        "gpu_fraction": [s[0].share[s[1]] if s else 1.0 for s in slices],
        "busy_ms": [r.stats.busy_us / 1000.0 for r in runtimes], "admitted": [r.stats.admitted for r in runtimes],
        "completed": [r.stats.completed for r in runtimes], "dropped": [r.stats.dropped for r in runtimes],
    }
    batch = {
        "batches": [len(r.batches) for r in runtimes],
        "batched_items": [sum(b.items for b in r.batches) for r in runtimes],
        "max_batch_items": [max((b.items for b in r.batches), default=0) for r in runtimes],
        "batch_ms": [sum(b.end_us - b.start_us for b in r.batches) / 1000.0 for r in runtimes],
    }
    out = Table()
    for name in table:
        kind = table.kind(name)
        fill = rows.get(name)
        if fill is None:
            fill = [1.0 if name == "gpu_fraction" else ("" if kind in ("str", "string") else 0)] * len(runtimes)
        out.add(name, list(table[name]) + list(fill), kind)
    for name, values in batch.items():
        out.add(name, [0] * n_llm + values, "float64" if name.endswith("_ms") else "int64")
    return out
