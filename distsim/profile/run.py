"""One profile: the device's peaks and the operator tables, then the model's shard on the backend and
every step of the grid that fits in memory, in order; a deadline stops it starting new step
measurements (what was left is listed, never guessed)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from distsim.catalog import ModelSpec
from distsim.profile import micro
from distsim.profile.backend import Backend, DeviceInfo
from distsim.profile.forward import DenseForward, Shard, Step, shard_of
from distsim.profile.grid import Grid, steps_of

MEMORY_SHARE = 0.9  # of the free memory a step's KV cache and activations may take


@dataclass
class Profile:
    """What one profile measured: step rows (shape columns and timings), operator tables, what it left."""

    device: DeviceInfo
    shard: Shard
    steps: list[dict] = field(default_factory=list)
    gemm: list[dict] = field(default_factory=list)
    attention: list[dict] = field(default_factory=list)
    sampler: list[dict] = field(default_factory=list)
    moe: list[dict] = field(default_factory=list)  # a MoE model's router, top-k and expert GEMMs
    all_reduce: list[dict] = field(default_factory=list)
    peaks: micro.Peaks | None = None
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _fits(b: Backend, shard: Shard, step: Step) -> bool:
    return shard.kv_bytes(step) + shard.activation_bytes(step) <= MEMORY_SHARE * b.free_bytes()


def profile(
    b: Backend, model: ModelSpec, tp: int, layers: int, grid: Grid, target_s: float, deadline_s: float,
    operators: bool = True, say: Callable[[str], None] = lambda _: None,
) -> Profile:
    """Measure ``grid`` on ``b`` (see the module docstring); ``deadline_s`` seconds from now no new
    measurement starts."""
    started = time.monotonic()
    late = lambda: time.monotonic() - started > deadline_s  # noqa: E731
    device = b.device()
    shard = shard_of(model, tp, layers, device.dtype_bytes)
    out = Profile(device, shard)
    out.peaks = micro.peaks(b, grid, target_s)
    if operators:  # first: the GEMM table's best rate is the device's matmul peak where it beats the square one
        out.gemm = micro.gemms(b, shard, grid, target_s)
        out.attention = micro.attention(b, shard, grid, target_s)
        out.sampler = micro.sampler(b, grid, model.vocab_size, target_s)
        if shard.experts:
            out.moe = micro.moe(b, shard, grid, target_s)
        out.peaks = micro.with_gemms(out.peaks, out.gemm)
        reduce = getattr(b, "all_reduce", None)
        if reduce is not None and device.count > 1:
            out.all_reduce = reduce(grid.all_reduce_bytes, target_s)
    forward = DenseForward(b, shard)
    steps = steps_of(grid)
    for i, step in enumerate(steps):
        label = f"{step.kind} {step.shape_columns()}"
        if late():
            out.skipped.append(f"{label}: past the deadline")
            continue
        if not _fits(b, shard, step):
            out.skipped.append(f"{label}: its KV cache does not fit in memory")
            continue
        t = b.time(forward.step(step), target_s)
        out.steps.append({"kind": step.kind, **step.shape_columns(), **micro.timing_row(t)})
        gc.collect()  # the step's KV caches go before the next is allocated
        say(f"step {i + 1}/{len(steps)}: {step.kind} {step.tokens} tokens, {t.median_us / 1e3:.3f} ms")
    out.seconds = time.monotonic() - started
    return out
