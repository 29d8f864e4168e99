"""The config node of ``cluster.engine.storage_kv``: off while both capacities are null. Its keys are checked into
:class:`~distsim.instance.storage_kv.settings.StorageKvSettings`; the defaults' source is cited there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StorageKvConfig:
    """A local drive below the CPU KV tier (LMCache's local disk backend): its size and speeds."""

    capacity_blocks: int | None = None  # the drive's share for KV, in KV blocks; or capacity_gb; both null: no tier
    capacity_gb: float | None = None  # or the same in GB (1e9 bytes), counted in whole blocks of this engine
    read_gbps: float = 12.0  # sequential read, GB/s (1e9 B/s); Micron 7600 MAX 6.4 TB datasheet
    write_gbps: float = 7.0  # sequential write, GB/s; the same datasheet
    latency_us: float | None = None  # fixed time of each read or write operation, microseconds (required with a capacity)
