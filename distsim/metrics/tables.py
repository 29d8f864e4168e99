"""The tables and the summary of a finished run, read off the cluster, its instances and the recorder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from distsim.events.loop import EventLoop
from distsim.feature import Measures, Parts
from distsim.metrics.columns import Table
from distsim.metrics.occupancy import KV_USE_COLUMNS, MEMORY_USE_COLUMNS, kv_use_columns
from distsim.metrics.summary import summarize

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.protocols import World


def measure(parts: Parts, loop: EventLoop, end_us: int) -> Measures:
    """The request table, the instance table and the summary (fitness not yet added) of the run of
    ``parts``, each of its features adding its own: instance columns, then (after the summary, which a
    feature may make its own way, such as a measurement window) its section, in registry order."""
    world, features = parts.world, list(parts.features.values())
    table = instance_table(world, world.first_arrival_us or 0, end_us)
    m = Measures(parts, parts.recorder.columns(), table, {}, end_us, events=loop.events)
    for feature in features:
        feature.instance_columns(m)

    def bill(start_us: int, stop_us: int) -> np.ndarray | None:  # what the fleet is billed within a span
        return next((b for f in features if (b := f.billing(start_us, stop_us)) is not None), None)

    summary = next((s for f in features if (s := f.summarize(m, bill)) is not None), None)
    if summary is None:
        itl_values, itl_weights = itl_samples(world)
        m.start_us, m.stop_us = world.first_arrival_us or 0, end_us
        summary = summarize(
            m.table, m.instances, itl_values, itl_weights, seed=parts.seed, events=loop.events, start_us=m.start_us,
            end_us=end_us, billed_s=bill(m.start_us, end_us),
        )
    m.summary = summary
    for feature in features:
        section = feature.report(m)
        if section is not None:
            summary[feature.name] = section
    return m


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


def instance_table(cluster: World, start_us: int, end_us: int) -> Table:
    """instances.parquet: one row per instance (engine); the KV use over time weighted within the run's span
    ``[start_us, end_us]``."""
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
                "peak_waiting": s.peak_waiting, "peak_running": s.peak_running,
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
    columns.update(kv_use_columns(cluster.instances, cluster.pool_of, start_us, end_us))
    if any(inst.stats.serving_steps is not None for inst in cluster.instances):  # the serving layer's share
        columns.update(serving_columns(cluster.instances))
    dp_groups = [i.dp_group for i in cluster.instances]
    if len(set(dp_groups)) < len(dp_groups):  # data parallelism: each engine's configured instance (its DP group)
        columns = {"instance": columns.pop("instance"), "dp_group": dp_groups, **columns}
    if any(inst.cpu is not None for inst in cluster.instances):  # a CPU KV tier somewhere: its counters
        columns.update(cpu_tier_columns(cluster.instances))
    if any(inst.params.speculative is not None for inst in cluster.instances):  # speculative decoding somewhere
        columns.update(speculative_columns(cluster.instances))
    table = Table()
    for name, values in columns.items():
        table.add(name, values, _INSTANCE_KINDS.get(name, "float64" if name.endswith("_ms") else "int64"))
    return table


# instances.parquet's columns that are neither counts (int64) nor milliseconds (float64)
_INSTANCE_KINDS = {"pool": "str", "role": "str", "hardware": "str", "price_usd_per_gpu_hour": "float64",
                   "peak_kv_utilization": "float64", **{name: "float64" for name in (*KV_USE_COLUMNS, *MEMORY_USE_COLUMNS)}, "mig_profile": "str", "gpu_fraction": "float64",
                   "spec_tokens_per_step": "float64"}


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


def speculative_columns(instances: Sequence[Instance]) -> dict[str, list]:
    """instances.parquet's speculative decoding columns (zeros for an engine that does not speculate):
    sequence-steps verified, tokens drafted, drafts accepted, and the tokens per verified sequence-step."""
    sets = [inst.decoders if inst.params.speculative is not None else None for inst in instances]
    return {
        "spec_verify_steps": [d.steps if d else 0 for d in sets],
        "spec_drafted_tokens": [d.drafted if d else 0 for d in sets],
        "spec_accepted_tokens": [d.accepted if d else 0 for d in sets],
        "spec_tokens_per_step": [d.emitted / d.steps if d and d.steps else 0.0 for d in sets],
    }


ITL_CHUNK = 1 << 19  # inter-token gaps gathered before they are tallied (a merge's peak: some 20 bytes a gap)


def itl_samples(cluster: World) -> tuple[np.ndarray, np.ndarray]:
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
