"""The tables and the summary of a finished run, read off the cluster, its instances and the recorder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from distsim.cluster.mig import slice_columns
from distsim.events.loop import EventLoop
from distsim.metrics.columns import Table
from distsim.metrics.recorder import Recorder
from distsim.metrics.summary import rnd, summarize

if TYPE_CHECKING:
    from distsim.autoscale.controller import Autoscaler
    from distsim.cluster.pools import PoolSpec
    from distsim.instance.instance import Instance
    from distsim.metrics.window import WindowProbe
    from distsim.protocols import World
    from distsim.runtime.replica import RuntimeReplica

    # the world a run builds and measures: a cluster, a fleet of cells, or the typed front over a cluster
    RunWorld = World[Instance, PoolSpec, RuntimeReplica, Autoscaler]


def measure(
    cluster: RunWorld, recorder: Recorder, loop: EventLoop, end_us: int, seed: int,
    window: WindowProbe | None = None,
) -> tuple[Table, Table, dict]:
    """The request table, the instance table and the summary (fitness not yet added). ``window``: a
    measurement window's distsim.metrics.window.WindowProbe, which makes the summary its own way."""
    table = recorder.columns()
    instances = instance_table(cluster)
    runtimes = cluster.runtimes  # batching runtimes beside the LLM cluster (distsim.runtime)
    if runtimes:
        from distsim.metrics.types import runtime_rows

        instances = runtime_rows(instances, runtimes)
    if window is not None:
        summary = window.summary(table, instances, cluster, seed=seed, events=loop.events, end_us=end_us)
    else:
        itl_values, itl_weights = itl_samples(cluster)
        start_us = cluster.first_arrival_us or 0
        autoscaler = cluster.autoscaler  # cost follows the replicas that ran
        billed_s = autoscaler.billed_s(start_us, end_us) if autoscaler is not None else None
        summary = summarize(
            table, instances, itl_values, itl_weights, seed=seed, events=loop.events, start_us=start_us, end_us=end_us,
            billed_s=billed_s,
        )
        if autoscaler is not None:
            from distsim.metrics.autoscale import autoscale_summary

            summary["autoscale"] = autoscale_summary(autoscaler, instances, start_us, end_us)
    if cluster.disaggregated:
        summary["kv_transfer"] = {
            "transfers": cluster.transfers,
            "mean_ms": rnd(cluster.transfer_us_total / cluster.transfers / 1000.0) if cluster.transfers else None,
            "gb": rnd(cluster.transfer_bytes_total / 1e9, 6),
        }
    if "mig_profile" in instances:  # MIG slices: how the fleet packs
        from distsim.metrics.mig import mig_summary

        summary["mig"] = mig_summary(cluster, instances)
    summary["signals"] = {"scrapes": cluster.board.scrapes}
    if "type" in table:  # request types in play (workload.mix): per-type figures
        summary["types"] = types_section(table, runtimes, summary["_derived"]["span_s"], window)
    if cluster.hedgers:  # hedging on: its request columns and summary section
        from distsim.metrics.hedging import add_hedging

        summary["hedging"] = add_hedging(table, instances, cluster)
    return table, instances, summary


def types_section(table: Table, runtimes: Sequence[RuntimeReplica], span_s: float, window: WindowProbe | None) -> dict:
    """summary.json's ``types``; with a measurement window, its measured requests and the batches ending in
    its span (distsim.metrics.window)."""
    if window is not None:
        return window.types(table, runtimes, span_s)
    from distsim.metrics.types import types_summary

    return types_summary(table, runtimes, span_s)


# the serving layer's share of busy_ms (roofline3: distsim/instance/latency/serving.py), summed over the steps
SERVING_COLUMNS = ("padding_ms", "eager_ms", "collectives_ms", "sampler_ms", "host_ms")


def serving_columns(instances: list) -> dict[str, list[float]]:
    """instances.parquet's serving-layer columns: each instance's steps by shape priced by its latency
    model's ``step_terms`` (zeros for an instance whose model has none)."""
    columns: dict[str, list[float]] = {name: [] for name in SERVING_COLUMNS}
    for inst in instances:
        totals = [0.0] * len(SERVING_COLUMNS)
        for key, steps in (inst.stats.serving_steps or {}).items():
            terms = inst.latency.step_terms(*key) if isinstance(key, tuple) else inst.latency.step_terms(key, key)
            for i, us in enumerate(terms):
                totals[i] += steps * us
        for name, us in zip(SERVING_COLUMNS, totals):
            columns[name].append(us / 1000.0)
    return columns


def instance_table(cluster: RunWorld) -> Table:
    """instances.parquet: one row per instance (engine)."""
    rows = []
    for inst in cluster.instances:
        s = inst.stats
        pool = cluster.pool_of[inst.index]
        total = inst.kv.total
        rows.append(
            {
                "instance": inst.index,
                "pool": inst.pool,
                "role": inst.role,
                "hardware": inst.hardware,
                "gpus": inst.gpus,
                "price_usd_per_gpu_hour": float(pool.hardware.price_usd_per_gpu_hour),
                "total_kv_blocks": total,
                "busy_ms": s.busy_us / 1000.0,
                "steps": s.steps,
                "prefill_tokens": s.prefill_tokens,
                "decode_tokens": s.decode_tokens,
                "peak_kv_blocks": s.peak_used_blocks,
                "peak_kv_utilization": s.peak_used_blocks / total,
                "kv_evictions": inst.kv.evictions,
                "preemptions": s.preemptions,
                "admitted": s.admitted,
                "completed": s.completed,
                "handed_off": s.handed_off,
                "dropped": s.dropped,
                "too_long": s.too_long,
                "cached_tokens": s.cached_tokens,
                "prompt_tokens": s.prompt_tokens,
            }
        )
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    if any(inst.stats.serving_steps is not None for inst in cluster.instances):  # the serving layer's share
        columns.update(serving_columns(cluster.instances))
    if cluster.dp is not None:  # data parallelism: each engine's configured instance (its DP group)
        columns = {"instance": columns.pop("instance"), "dp_group": [i.dp_group for i in cluster.instances], **columns}
    if any(inst.cpu is not None for inst in cluster.instances):  # a CPU KV tier somewhere: its counters
        columns.update(cpu_tier_columns(cluster.instances))
    if any(inst.batcher is not None for inst in cluster.instances):  # windowed prefill batching somewhere
        from distsim.metrics.batching import batching_columns

        columns.update(batching_columns(cluster.instances))
    if any(pool.mig is not None for pool in cluster.pool_of):  # MIG slices somewhere: per slice price and share
        columns.update(slice_columns(cluster.pool_of))
    table = Table()
    for name, values in columns.items():
        table.add(name, values, _INSTANCE_KINDS.get(name, "float64" if name.endswith("_ms") else "int64"))
    return table


# instances.parquet's columns that are neither counts (int64) nor milliseconds (float64)
_INSTANCE_KINDS = {"pool": "str", "role": "str", "hardware": "str", "price_usd_per_gpu_hour": "float64",
                   "peak_kv_utilization": "float64", "mig_profile": "str", "gpu_fraction": "float64"}


def cpu_tier_columns(instances: Sequence[Instance]) -> dict[str, list]:
    """instances.parquet's CPU KV tier columns (zeros for an instance without one)."""
    tiers = [(inst.cpu, inst.bs) for inst in instances]
    return {
        "cpu_kv_blocks": [t.total if t else 0 for t, _ in tiers],
        "cpu_stored_blocks": [t.stored_blocks if t else 0 for t, _ in tiers],
        "cpu_evicted_blocks": [t.evicted_blocks if t else 0 for t, _ in tiers],
        "cpu_loads": [t.loads if t else 0 for t, _ in tiers],
        "cpu_hit_blocks": [t.hit_blocks if t else 0 for t, _ in tiers],
        "cpu_hit_tokens": [t.hit_blocks * bs if t else 0 for t, bs in tiers],
        "cpu_load_ms": [t.load_us / 1000.0 if t else 0.0 for t, _ in tiers],
        "cpu_store_ms": [t.store_us / 1000.0 if t else 0.0 for t, _ in tiers],
    }


ITL_CHUNK = 1 << 19  # inter-token gaps gathered before they are tallied (a merge's peak: some 20 bytes a gap)


def itl_samples(cluster: RunWorld) -> tuple[np.ndarray, np.ndarray]:
    """All inter-token gaps as (values in microseconds, weights): each distinct gap once, sorted, with the
    summed weight of its samples, which gives the weighted distribution of the samples themselves. They are
    tallied a few million at a time, so memory stays small however many there are (a run of 131,072
    instances has over 100 million)."""
    tally = Tally()
    for inst in cluster.instances:
        s = inst.stats
        tally.add(np.asarray(s.itl_step_durations, dtype=np.int64), np.asarray(s.itl_step_weights, dtype=np.int64))
        if s.itl_run_counts:
            tally.add(
                np.frombuffer(s.itl_run_durations, dtype=np.int64),
                np.repeat(np.asarray(s.itl_run_weights, dtype=np.int64), s.itl_run_counts),
            )
        if s.itl_single:
            tally.add(np.asarray(s.itl_single, dtype=np.int64), np.ones(len(s.itl_single), dtype=np.int64))
    return tally.result()


class Tally:
    """Summed integer weights per distinct integer value, merged a chunk at a time."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.weights = np.zeros(0, dtype=np.int64)
        self._chunk: list[tuple[np.ndarray, np.ndarray]] = []
        self._held = 0

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if values.size:
            self._chunk.append((values, weights))
            self._held += values.size
            if self._held >= ITL_CHUNK:
                self._merge()

    def _merge(self) -> None:
        values = np.concatenate([self.values, *(v for v, _ in self._chunk)])
        weights = np.concatenate([self.weights, *(w for _, w in self._chunk)])
        self.values, where = np.unique(values, return_inverse=True)
        self.weights = np.bincount(where, weights=weights, minlength=self.values.size).astype(np.int64)
        self._chunk, self._held = [], 0

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct values, their summed weights), both float64."""
        if self._chunk:
            self._merge()
        return self.values.astype(np.float64), self.weights.astype(np.float64)
