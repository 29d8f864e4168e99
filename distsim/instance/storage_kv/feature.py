"""The storage KV tier as a run's feature: its instances.parquet columns and summary.json's ``storage_kv``.

Present only when some engine has a storage tier, so outputs without the option keep their columns and
sections (and their golden digests); an engine without one has zeros. The tier itself is built with the
engine's CPU tier (distsim.cluster.build.cpu_tier) and checks itself with it (INV-32).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.feature import Feature, Measures

if TYPE_CHECKING:
    from distsim.instance.instance import Instance


def _r(x: float) -> float:
    return round(float(x), 4)


class StorageKvFeature(Feature):
    name = "storage_kv"

    def instance_columns(self, m: Measures) -> None:
        for name, values in storage_columns(m.parts.world.instances).items():
            m.instances.add(name, values, "float64" if name.endswith("_ms") else "int64")

    def report(self, m: Measures) -> dict[str, Any]:
        """The tier's counters over the fleet, the prompt tokens hit by tier (GPU, CPU, storage) as shares of
        the scheduled prompt tokens, and the bytes each tier moved."""
        instances = m.parts.world.instances
        table = m.table
        scheduled = ~np.isnan(np.asarray(table["queue_ms"], dtype=float))
        prompt = int(np.asarray(table["input_tokens"])[scheduled].sum())
        cached = np.asarray(table["cached_tokens"])
        tiers = [(inst.cpu.storage, inst.bs) for inst in instances if inst.cpu is not None and inst.cpu.storage]
        cpu_tokens, storage_tokens = served_by_tier(instances, dict(zip(np.asarray(table["request_id"]).tolist(),
                                                                         cached.tolist())))
        gpu_tokens = int(cached[scheduled].sum()) - cpu_tokens - storage_tokens
        loads = sum(t.loads for t, _ in tiers)
        share = (lambda n: _r(n / prompt)) if prompt else (lambda n: 0.0)
        return {
            "blocks": sum(t.total for t, _ in tiers),
            "written_blocks": sum(t.written_blocks for t, _ in tiers),
            "dropped_blocks": sum(t.dropped_blocks for t, _ in tiers),
            "evicted_blocks": sum(t.evicted_blocks for t, _ in tiers),
            "loads": loads,
            "hit_blocks": sum(t.hit_blocks for t, _ in tiers),
            "hit_tokens": sum(t.hit_blocks * bs for t, bs in tiers),
            "load_ms_mean": _r(sum(t.load_us for t, _ in tiers) / loads / 1000.0) if loads else None,
            "hit_rate_by_tier": {"gpu": share(gpu_tokens), "cpu": share(cpu_tokens), "storage": share(storage_tokens)},
            "gb_moved": {  # over every GPU of each engine
                "cpu_stored": _gb(sum(c.stored_blocks * c.block_bytes * g for c, g in _with_gpus(instances))),
                "cpu_loaded": _gb(sum(c.hit_blocks * c.block_bytes * g for c, g in _with_gpus(instances))),
                "storage_written": _gb(sum(t.written_blocks * t.block_bytes for t, _ in tiers)),
                "storage_read": _gb(sum(t.hit_blocks * t.block_bytes for t, _ in tiers)),
            },
        }


def served_by_tier(instances: Sequence[Instance], cached: dict[int, int]) -> tuple[int, int]:
    """Of the prompt tokens each request found computed at its first admission (``cached``, by request id),
    those its loads before then brought from the CPU tier and from the drive (the latest load of a block
    names its tier); the rest the GPU's prefix cache held. Loads count more (hit_blocks): a load whose
    blocks are evicted again before the request is admitted, or one for a preempted request, serves none."""
    cpu = storage = 0
    for inst in instances:
        loads = inst.cpu_loads.first_loads if inst.cpu_loads is not None else None
        if not loads:
            continue
        bs = inst.bs
        for rid, ranges in loads.items():
            hit = cached.get(rid, 0) // bs
            tier: dict[int, bool] = {}
            for lo, hi, from_drive in ranges:
                for i in range(lo, min(hi, hit)):
                    tier[i] = from_drive
            drive = sum(tier.values())
            storage += drive * bs
            cpu += (len(tier) - drive) * bs
    return cpu, storage


def _gb(n: float) -> float:
    return round(n / 1e9, 6)


def _with_gpus(instances: Sequence[Instance]) -> list[tuple[Any, int]]:
    return [(inst.cpu, inst.gpus) for inst in instances if inst.cpu is not None]


def storage_columns(instances: Sequence[Instance]) -> dict[str, list]:
    """Blocks the drive holds at most, blocks written, dropped and evicted, loads, blocks and tokens loaded,
    the summed waits for its loads and the drive's write time, in milliseconds."""
    tiers = [(inst.cpu.storage if inst.cpu is not None else None, inst.bs) for inst in instances]
    return {
        "storage_kv_blocks": [t.total if t else 0 for t, _ in tiers],
        "storage_written_blocks": [t.written_blocks if t else 0 for t, _ in tiers],
        "storage_dropped_blocks": [t.dropped_blocks if t else 0 for t, _ in tiers],
        "storage_evicted_blocks": [t.evicted_blocks if t else 0 for t, _ in tiers],
        "storage_loads": [t.loads if t else 0 for t, _ in tiers],
        "storage_hit_blocks": [t.hit_blocks if t else 0 for t, _ in tiers],
        "storage_hit_tokens": [t.hit_blocks * bs if t else 0 for t, bs in tiers],
        "storage_load_ms": [t.load_us / 1000.0 if t else 0.0 for t, _ in tiers],
        "storage_write_ms": [t.write_us / 1000.0 if t else 0.0 for t, _ in tiers],
    }
