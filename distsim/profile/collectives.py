"""All-reduce by message size and group size, where the backend sees more than one device: one process
per device (``torch.multiprocessing``), NCCL on GPUs (gloo on the CPU), rendezvous through a file (no
network). Each size is reduced in groups of 2, 4 and 8 devices (those there are), every call aligned by
a barrier, timed on rank 0 (CUDA events, else the wall clock), the median of the repetitions kept; the
bus rate is NCCL's: 2 (n - 1) / n bytes per second moved per device."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distsim.profile.backend import MAX_REPS, MIN_REPS, WARMUP


def all_reduce_rows(devices: int, sizes: Sequence[int], target_s: float, cuda: bool) -> list[dict]:
    """The all-reduce table's rows (tp, bytes, timings, bus rate) over ``devices`` processes."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(devices, list(sizes), target_s, cuda, tmp), nprocs=devices, join=True)
        return json.loads((Path(tmp) / "rows.json").read_text())


def _timed(torch: Any, dist: Any, x: Any, group: Any, cuda: bool) -> float:
    dist.barrier(group=group)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_reduce(x, group=group)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3
    t = time.perf_counter_ns()
    dist.all_reduce(x, group=group)
    return (time.perf_counter_ns() - t) / 1e3


def _worker(rank: int, world: int, sizes: list[int], target_s: float, cuda: bool, tmp: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world)
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    width = 2 if cuda else 4
    rows = []
    for tp in (n for n in (2, 4, 8) if n <= world):
        group = dist.new_group(list(range(tp)))  # every rank creates every group
        if rank >= tp:
            continue
        for size in sizes:
            x = torch.zeros(max(1, size // width), dtype=dtype, device=device)
            for _ in range(WARMUP):
                _timed(torch, dist, x, group, cuda)
            first = max(_timed(torch, dist, x, group, cuda), 1e-3)
            reps = int(min(MAX_REPS, max(MIN_REPS, target_s * 1e6 / first)))
            count = torch.tensor([reps], device=device)
            dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)  # one count for every rank of the group
            reps = int(count.item())
            samples = np.array([_timed(torch, dist, x, group, cuda) for _ in range(reps)])
            p10, med, p90 = np.percentile(samples, [10, 50, 90])
            moved = 2 * (tp - 1) / tp * x.numel() * width
            rows.append({"tp": tp, "bytes": x.numel() * width, "measured_ms": med / 1e3, "p10_ms": p10 / 1e3,
                         "p90_ms": p90 / 1e3, "repetitions": reps, "bus_gbps": moved / (med * 1e-6) / 1e9})
    if rank == 0:
        (Path(tmp) / "rows.json").write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()
