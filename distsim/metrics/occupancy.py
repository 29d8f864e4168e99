"""KV-cache and memory occupancy over time per instance: instances.parquet's time-weighted utilisation columns.

Why time-weighted: a peak says how close an engine came to preempting once; how full its cache was over
the run (the median, the tail) says whether it had room to spare. Each instance notes the blocks in use at
every step event where they changed (distsim.instance.stats: the use planned for the step starting then,
or an idle engine's rest), so the use is a step function of time. Each level counts for the time it held
within the run's span (first arrival to the end); before its first note an instance held nothing.
Percentiles are inverted-CDF (the smallest level held for at least q% of the span), as summary.json's
weighted inter-token latency.

A fast-forwarded run of decode steps takes the blocks of its later steps at its end at once; the instance
keeps what the run's decoders needed at each step (InstanceStats.kv_runs), and :func:`kv_levels`
gives those blocks back to the step boundaries that took them, so a fast-forwarded run gives the same
columns as stepping every step (tests/test_kv_occupancy.py). What the notes miss: blocks freed between
step events (a P/D hand-off's release when its transfer lands), noted at the next step event; so
``kv_utilization_max`` can exceed ``peak_kv_utilization`` (read at each step's end) on a P/D prefill engine,
which holds a handed-off prompt's blocks beside a new chunk's until the transfer lands within the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.instance.stats import InstanceStats

OCCUPANCY_STATS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))  # besides the mean and the max
KV_USE_COLUMNS = tuple(f"kv_utilization_{n}" for n in ("mean", *(k for k, _ in OCCUPANCY_STATS), "max"))
IDLE = {"mean": 0.0, **{k: 0.0 for k, _ in OCCUPANCY_STATS}, "max": 0.0}  # an instance that held no block
MEMORY_USE_COLUMNS = tuple(f"memory_utilization_{n}" for n in ("mean", *(k for k, _ in OCCUPANCY_STATS), "max"))


@dataclass(frozen=True)
class GpuMemory:
    """One GPU of an instance: what it holds besides the KV blocks (weights, the activation reserve, windows),
    the bytes of one KV block on it, and its memory."""

    resident_bytes: float
    block_bytes: float
    memory_bytes: float

    @classmethod
    def of(cls, pool: Any, block_size: int) -> GpuMemory:
        """An instance's of its pool (distsim.cluster.pools.PoolSpec)."""
        block_bytes = pool.model.kv_bytes_per_token_per_gpu(pool.tensor_parallel_size) * block_size
        return cls(pool.resident_bytes_per_gpu, block_bytes, float(pool.hardware.memory_bytes))


def level_durations(change_us: np.ndarray, levels: np.ndarray, start_us: int, end_us: int) -> tuple[np.ndarray, np.ndarray]:
    """The levels of a step function (0 before its first change) and how long each held within
    ``[start_us, end_us]``."""
    times = np.clip(np.concatenate(([start_us], change_us)), start_us, end_us)
    values = np.concatenate(([0], levels))
    durations = np.diff(np.concatenate((times, [end_us])))
    return values, durations


def time_weighted(values: np.ndarray, durations: np.ndarray) -> dict[str, float]:
    """Mean, inverted-CDF percentiles and max of integer levels (>= 0) held for ``durations`` (NaN when no
    time passed): from the time at each level (a histogram over the levels, no sort)."""
    keep = durations > 0
    values, durations = values[keep], durations[keep].astype(np.float64)
    if values.size == 0:
        return {"mean": np.nan, **{k: np.nan for k, _ in OCCUPANCY_STATS}, "max": np.nan}
    at_level = np.bincount(values, weights=durations)
    cum = np.cumsum(at_level)
    total = cum[-1]
    out = {"mean": float((values * durations).sum() / total)}  # not np.dot: BLAS wakes its threads for it
    levels = np.searchsorted(cum, np.array([q for _, q in OCCUPANCY_STATS]) / 100.0 * total, side="left")
    out.update((key, float(level)) for (key, _), level in zip(OCCUPANCY_STATS, np.minimum(levels, cum.size - 1).tolist()))
    out["max"] = float(cum.size - 1)
    return out


def run_growth(stats: InstanceStats, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The blocks each fast-forwarded run took at its steps' boundaries after its first (the run applies them
    at its end at once): (times, blocks), step s + i taking ``phase_counts[(1 - s - i) % block_size]`` at
    the end of step s + i - 1, as distsim.instance.decode_set counts them."""
    if not stats.kv_runs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    counts = np.asarray(stats.itl_run_counts, dtype=np.int64)
    first_end = np.cumsum(counts) - counts  # each run's first step end in itl_run_ends
    ends = np.frombuffer(stats.itl_run_ends, dtype=np.int64)
    table = np.fromiter(stats.kv_runs, dtype=np.int64, count=len(stats.kv_runs)).reshape(-1, 3 + block_size)
    run, start, steps, phases = table[:, 0], table[:, 1], table[:, 2], table[:, 3:]
    points = steps - 1  # boundaries after the first step
    which = np.repeat(np.arange(len(run)), points)
    i = np.arange(int(points.sum())) - np.repeat(np.cumsum(points) - points, points) + 1  # 1 .. steps - 1
    times = ends[first_end[run][which] + i - 1]
    blocks = phases[which, (1 - start[which] - i) % block_size]
    taken = blocks > 0
    return times[taken], blocks[taken]


def kv_levels(stats: InstanceStats, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The blocks in use as a step function: (change times, levels), the notes with the runs' growth."""
    note_us = np.fromiter(stats.kv_change_us, dtype=np.int64, count=len(stats.kv_change_us))
    noted = np.fromiter(stats.kv_change_blocks, dtype=np.int64, count=len(stats.kv_change_blocks))
    grow_us, grown = run_growth(stats, block_size)
    if not grow_us.size:
        return note_us, noted
    times = np.concatenate((note_us, grow_us))
    is_note = np.concatenate((np.ones(note_us.size, bool), np.zeros(grow_us.size, bool)))
    order = np.argsort(times, kind="stable")  # by time, a note before growth at the same instant (two sorted runs)
    times, is_note = times[order], is_note[order]
    added = np.cumsum(np.concatenate((np.zeros(note_us.size, np.int64), grown))[order])
    group = np.cumsum(is_note)  # the latest note (0: none yet, level 0)
    base = np.concatenate(([0], noted))[group]
    since = np.concatenate(([0], added[is_note]))[group]
    return times, base + added - since


def kv_use_columns(instances: Sequence[Instance], pool_of: Sequence[Any], start_us: int, end_us: int) -> dict[str, list[float]]:
    """instances.parquet's ``kv_utilization_*`` (the share of each instance's KV blocks in use) and
    ``memory_utilization_*`` (the share of a GPU's memory held: what it holds besides the KV blocks plus the
    blocks in use), each mean, p50, p90, p99 and max over the run,
    time-weighted (``pool_of``: each instance's pool by its global number). Both are increasing affine maps of the blocks in use, so each figure is the map of the
    blocks' own figure."""
    names = ("mean", *(k for k, _ in OCCUPANCY_STATS), "max")
    columns: dict[str, list[float]] = {name: [] for name in (*KV_USE_COLUMNS, *MEMORY_USE_COLUMNS)}
    for inst in instances:
        gpu = GpuMemory.of(pool_of[inst.index], inst.bs)
        if inst.stats.kv_change_us or end_us <= start_us:
            blocks = time_weighted(*level_durations(*kv_levels(inst.stats, inst.bs), start_us, end_us))
        else:  # never held a block (most of a large fleet on a short run): no array work
            blocks = IDLE
        for n, kv_name, memory_name in zip(names, KV_USE_COLUMNS, MEMORY_USE_COLUMNS):
            columns[kv_name].append(blocks[n] / inst.kv.total)
            columns[memory_name].append((gpu.resident_bytes + blocks[n] * gpu.block_bytes) / gpu.memory_bytes)
    return columns
