"""``cluster.engine.storage_kv`` checked into :class:`StorageKvSettings` (a bad value: one line naming the key).

The defaults are a datacenter NVMe drive's datasheet figures: the Micron 7600 MAX (PCIe Gen5, 6.4 TB)
reads at 12 GB/s and writes at 7 GB/s sequentially (Micron's specifications, as StorageReview's review of
the drive lists them: "12 GB/s sequential read, 7 GB/s sequential write";
https://www.storagereview.com/review/micron-7600-max-review). A drive's per-operation latency
depends on the queue depth, the file system and O_DIRECT, and no figure for KV-sized operations is cited
here, so ``latency_us`` has no default; the capacity is the deployment's choice, so it has none either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from distsim.errors import ConfigError


@dataclass(frozen=True)
class StorageKvSettings:
    """A storage tier's size in this engine's KV blocks and its drive's speeds."""

    capacity_blocks: int
    read_gbps: float  # GB/s (1e9 B/s)
    write_gbps: float
    latency_us: float  # per operation


def _number(value: Any, key: str, rule: str, ok) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise ConfigError(key, f"{rule} (got {value!r})")
    return float(value)


def resolve_storage_kv(node: Any, key: str, block_bytes: float, cpu_kv_blocks: int) -> StorageKvSettings | None:
    """The settings of a ``cluster.engine.storage_kv`` node (None, no tier, when it gives no capacity).
    ``block_bytes``: one KV block of this engine over all its GPUs, what ``capacity_gb`` is counted in."""
    if node is None:
        return None
    blocks, gb = node.get("capacity_blocks"), node.get("capacity_gb")
    if blocks is None and gb is None:
        return None
    if blocks is not None and gb is not None:
        raise ConfigError(f"{key}.capacity_gb", "give capacity_blocks or capacity_gb, not both")
    if not cpu_kv_blocks:
        raise ConfigError(f"{key}.capacity_{'blocks' if gb is None else 'gb'}",
                          "needs cpu_kv_blocks > 0: the storage tier holds the blocks the CPU KV tier evicts"
                          " (LMCache's hierarchy); set cpu_kv_blocks, or leave the storage tier's capacity null")
    if blocks is not None:
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ConfigError(f"{key}.capacity_blocks", f"must be an integer >= 1 (got {blocks!r})")
    else:
        gb = _number(gb, f"{key}.capacity_gb", "must be a number of GB > 0", lambda v: v > 0)
        blocks = math.floor(gb * 1e9 / block_bytes)
        if blocks < 1:
            raise ConfigError(f"{key}.capacity_gb", f"holds no KV block of {block_bytes:.0f} bytes (got {gb!r})")
    read = _number(node.get("read_gbps"), f"{key}.read_gbps", "must be a bandwidth in GB/s > 0", lambda v: v > 0)
    write = _number(node.get("write_gbps"), f"{key}.write_gbps", "must be a bandwidth in GB/s > 0", lambda v: v > 0)
    latency = node.get("latency_us")
    if latency is None:
        raise ConfigError(f"{key}.latency_us", "is required: the drive's time per read or write operation, in"
                                               " microseconds (no datasheet default)")
    latency = _number(latency, f"{key}.latency_us", "must be microseconds >= 0", lambda v: v >= 0)
    return StorageKvSettings(int(blocks), read, write, latency)
