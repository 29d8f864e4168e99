"""The config node of a batching-runtime pool (``cluster.pools[i].runtime``, with ``kind: runtime``): what
NVIDIA Triton's dynamic batcher and instance groups set, and the service curve that times a batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CurveConfig:
    """Batch latency as a function of batch size and request size (distsim.runtime.curves): ``roofline``
    (the catalog model's FLOPs and bytes on the pool's GPU), ``table`` (a fitted grid, interpolated) or
    ``fixed`` (one time for every batch). Keys of the other kinds stay null."""

    kind: str = "roofline"  # roofline | table | fixed
    batch_ms: float | None = None  # fixed: every batch takes this long
    batch_sizes: list[int] | None = None  # table: the grid's batch sizes (items), ascending
    sizes: list[float] | None = None  # table: the grid's request sizes (the type's unit), ascending
    ms: Any = None  # table (a list of rows of numbers): ms[i][j], a batch of batch_sizes[i] items of sizes[j]
    compute_efficiency: float | None = None  # roofline: achieved over the GPU's bf16 tensor peak (null: 0.4)
    memory_efficiency: float | None = None  # roofline: achieved over its memory bandwidth (null: 0.7)
    overhead_ms: float | None = None  # roofline: fixed time per batch, launch and pre/post-processing (null: 0.5)


@dataclass
class RuntimeConfig:
    """A runtime replica serves one model: a queue, batches closed at ``max_batch_size`` items or when their
    oldest request has waited ``batch_window_ms`` (Triton's max_queue_delay), ``concurrency`` batches in flight
    (Triton's instance group count)."""

    serves: str | None = None  # the request type it serves (workload.mix); null: its model's modality
    max_batch_size: int = 8  # items (images, audio windows) per batch
    batch_window_ms: float = 0.0  # 0: a batch leaves with what is queued as soon as a slot is free
    concurrency: int = 1  # batches in flight at once (Triton's instance count)
    curve: CurveConfig = field(default_factory=CurveConfig)
