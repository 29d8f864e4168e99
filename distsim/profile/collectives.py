"""All-reduce by message size and group size, where the backend sees more than one device: one process
per device (``torch.multiprocessing``), NCCL on GPUs (gloo on the CPU), rendezvous through a file (no
network). Each size is reduced in groups of 2, 4 and 8 devices (those there are), every call aligned by
a barrier, timed on rank 0 (CUDA events, else the wall clock), the median of the repetitions kept; the
bus rate is NCCL's: 2 (n - 1) / n bytes per second moved per device.

On the numpy backend (:func:`host_all_reduce_rows`, ``--cpu-ranks N``) the ranks are CPU processes over
shared memory, each summing every rank's buffer into its own (a one-shot all-reduce, as vLLM's custom
kernel does on GPUs), between two barriers: a CPU's figures, which let CI run the table and its fit
end to end without PyTorch."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distsim.profile.backend import MAX_REPS, MIN_REPS, WARMUP


def _row(tp: int, nbytes: int, samples: np.ndarray, reps: int) -> dict:
    p10, med, p90 = np.percentile(samples, [10, 50, 90])
    moved = 2 * (tp - 1) / tp * nbytes
    return {"tp": tp, "bytes": nbytes, "measured_ms": med / 1e3, "p10_ms": p10 / 1e3, "p90_ms": p90 / 1e3,
            "repetitions": reps, "bus_gbps": moved / (med * 1e-6) / 1e9}


def host_all_reduce_rows(ranks: int, sizes: Sequence[int], target_s: float) -> list[dict]:
    """The all-reduce table's rows over ``ranks`` CPU processes (float32, shared memory; module docstring)."""
    import multiprocessing as mp
    from multiprocessing import shared_memory

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    rows: list[dict] = []
    for tp in (n for n in (2, 4, 8) if n <= ranks):
        for size in sizes:
            elems = max(1, size // 4)
            shm = shared_memory.SharedMemory(create=True, size=elems * 4 * tp + 8)
            try:
                barrier = ctx.Barrier(tp)
                procs = [ctx.Process(target=_host_worker, args=(r, tp, shm.name, elems, target_s, barrier)) for r in range(1, tp)]
                for p in procs:
                    p.start()
                samples, reps = _host_worker(0, tp, shm.name, elems, target_s, barrier)
                for p in procs:
                    p.join()
            finally:
                shm.close()
                shm.unlink()
            rows.append(_row(tp, elems * 4, np.array(samples), reps))
    return rows


def _host_worker(rank: int, tp: int, name: str, elems: int, target_s: float, barrier: Any) -> tuple[list[float], int]:
    """One rank's timed all-reduces over the shared block ``name``."""
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name=name)
    try:
        return _host_timings(rank, tp, shm.buf, elems, target_s, barrier)
    finally:
        shm.close()  # the views into it are gone with _host_timings' frame


def _host_timings(rank: int, tp: int, buf: Any, elems: int, target_s: float, barrier: Any) -> tuple[list[float], int]:
    """Rank 0 sets the repetitions (a slot after the buffers) for every rank."""
    bufs = np.ndarray((tp, elems), dtype=np.float32, buffer=buf)
    count = np.ndarray((1,), dtype=np.int64, buffer=buf, offset=tp * elems * 4)
    mine = np.ones(elems, dtype=np.float32)

    def once() -> float:
        barrier.wait()
        t = time.perf_counter_ns()
        bufs[rank] = mine  # publish this rank's input
        barrier.wait()
        np.sum(bufs, axis=0, out=mine)  # read every rank's and sum (one-shot)
        barrier.wait()  # every rank done reading before a buffer is overwritten
        return (time.perf_counter_ns() - t) / 1e3

    for _ in range(WARMUP):
        once()
    first = max(once(), 1e-3)
    if rank == 0:
        count[0] = int(min(MAX_REPS, max(MIN_REPS, target_s * 1e6 / first)))
    barrier.wait()
    reps = int(count[0])
    return [once() for _ in range(reps)], reps


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
            rows.append(_row(tp, x.numel() * width, samples, reps))
    if rank == 0:
        (Path(tmp) / "rows.json").write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()
