"""KV-cache and memory occupancy over time per instance: instances.parquet's time-weighted utilisation columns.

Why time-weighted: a peak says how close an engine came to preempting once; how full its cache was over
the run (the median, the tail) says whether it had room to spare. Each instance notes the blocks in use at
every step event where they changed (distsim.instance.stats: the use planned for the step starting then,
or an idle engine's rest), so the use is a step function of time. Each level counts for the time it held
within the run's span (first arrival to the end); before its first note an instance held nothing.
Percentiles are inverted-CDF (the smallest level held for at least q% of the span), as summary.json's
weighted inter-token latency.

What the notes miss (so ``kv_utilization_max`` can sit below ``peak_kv_utilization``, which is read at
each step's end before the requests it finished leave): blocks a fast-forwarded run of decode steps takes
after its first step (noted when the run ends), and blocks freed between step events (a P/D hand-off's
release when its transfer lands), noted at the next step event. The other way round, a P/D prefill engine
can hold a handed-off prompt's blocks beside a new chunk's from one step's start until the transfer lands
within it: the notes see both, the peak at the step's end only the chunk's, so there the max can exceed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distsim.instance.instance import Instance

OCCUPANCY_STATS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))  # besides the mean and the max
KV_USE_COLUMNS = tuple(f"kv_utilization_{n}" for n in ("mean", *(k for k, _ in OCCUPANCY_STATS), "max"))
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
    """Mean, inverted-CDF percentiles and max of levels held for ``durations`` (NaN when no time passed)."""
    keep = durations > 0
    values, durations = values[keep], durations[keep].astype(np.float64)
    if values.size == 0:
        return {"mean": np.nan, **{k: np.nan for k, _ in OCCUPANCY_STATS}, "max": np.nan}
    order = np.argsort(values, kind="stable")
    values, durations = values[order], durations[order]
    cum = np.cumsum(durations)
    total = cum[-1]
    out = {"mean": float((values * durations).sum() / total)}  # not np.dot: BLAS wakes its threads for it
    at = np.minimum(np.searchsorted(cum, np.array([q for _, q in OCCUPANCY_STATS]) / 100.0 * total, side="left"), values.size - 1)
    out.update((key, float(values[i])) for (key, _), i in zip(OCCUPANCY_STATS, at.tolist()))
    out["max"] = float(values[-1])
    return out


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
        s = inst.stats
        change_us = np.asarray(s.kv_change_us, dtype=np.int64)
        levels = np.asarray(s.kv_change_blocks, dtype=np.int64)
        blocks = time_weighted(*level_durations(change_us, levels, start_us, end_us))
        for n, kv_name, memory_name in zip(names, KV_USE_COLUMNS, MEMORY_USE_COLUMNS):
            columns[kv_name].append(blocks[n] / inst.kv.total)
            columns[memory_name].append((gpu.resident_bytes + blocks[n] * gpu.block_bytes) / gpu.memory_bytes)
    return columns
