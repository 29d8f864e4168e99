"""What the profiler measures: the step grid and the operator grids, sized to a time budget.

``full`` is the step sets of ``../shared/data/h100_steps`` (decodes of 1-256 sequences at 128-8192
tokens, prefills of 16-8192 tokens, chunks after 2048-8192 cached, mixed steps: 60 steps), so a
profile of any GPU is read and fitted the way the H100's tables are. Its cost is bounded before it
runs: each measurement takes its warm-up and sizing calls plus ``target_s`` of repetitions (at least
5), so a step of t seconds costs at most (3 + max(5, target / t)) t; with the datasheet step model's
estimate of t (:func:`planned_seconds`) the full grid of an 8B model at TP 1 on an H100 plans to well
under a minute, a tenth of the ten-minute budget, leaving room for the operator tables, the weights'
allocation and a GPU several times slower than its datasheet. ``tiny`` is a few dozen small steps for a
CPU backend (tests, a first look).
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim.profile.backend import MAX_REPS, MIN_REPS, WARMUP
from distsim.profile.forward import Step

GRIDS = ("full", "tiny")


@dataclass(frozen=True)
class Grid:
    """One grid's step sets and operator sizes."""

    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    prefills: tuple[int, ...]
    split_prefill: tuple[int, tuple[int, ...]]  # (tokens, split evenly over each count of sequences)
    chunk_tokens: tuple[int, ...]
    chunk_contexts: tuple[int, ...]
    mixed_prefills: tuple[int, ...]
    mixed_batches: tuple[int, ...]
    mixed_context: int
    gemm_rows: tuple[int, ...]
    attention_kv_heads: tuple[int, ...]
    attention_contexts: tuple[int, ...]
    attention_batches: tuple[int, ...]
    sampler_vocabs: tuple[int, ...]
    sampler_rows: tuple[int, ...]
    peak_size: int  # the square matmul that measures the peak
    copy_bytes: int  # the copy that measures the bandwidth
    all_reduce_bytes: tuple[int, ...]


FULL = Grid(
    decode_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    decode_contexts=(128, 512, 2048, 8192),
    prefills=(16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    split_prefill=(2048, (4, 16)),
    chunk_tokens=(512, 2048),
    chunk_contexts=(2048, 8192),
    mixed_prefills=(256, 1024, 2048),
    mixed_batches=(16, 64, 128),
    mixed_context=1024,
    gemm_rows=(1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    attention_kv_heads=(1, 2, 4, 8),
    attention_contexts=(512, 2048, 8192),
    attention_batches=(1, 32, 128),
    sampler_vocabs=(32000, 128256, 151936),
    sampler_rows=(1, 32, 256),
    peak_size=8192,
    copy_bytes=1 << 30,
    all_reduce_bytes=tuple(1 << k for k in range(12, 29)),  # 4 KiB-256 MiB, four of them in the NCCL band
)

TINY = Grid(
    decode_batches=(1, 4, 16),
    decode_contexts=(16, 64),
    prefills=(8, 32, 96),
    split_prefill=(64, (4,)),
    chunk_tokens=(16,),
    chunk_contexts=(64,),
    mixed_prefills=(32,),
    mixed_batches=(4,),
    mixed_context=32,
    gemm_rows=(1, 16, 64),
    attention_kv_heads=(1, 2),
    attention_contexts=(16, 64),
    attention_batches=(1, 4),
    sampler_vocabs=(256, 1024),
    sampler_rows=(1, 8),
    peak_size=128,
    copy_bytes=1 << 20,
    all_reduce_bytes=(1 << 12, 1 << 16, 1 << 20),
)


def grid_named(name: str) -> Grid:
    return {"full": FULL, "tiny": TINY}[name]


def steps_of(g: Grid) -> list[Step]:
    """The grid's steps in the order they are measured and written."""
    out = [Step("decode", (), b, c) for c in g.decode_contexts for b in g.decode_batches]
    out += [Step("prefill", ((n, 0),)) for n in g.prefills]
    total, splits = g.split_prefill
    out += [Step("prefill", tuple((total // k, 0) for _ in range(k))) for k in splits]
    out += [Step("prefill_ctx", ((n, c),)) for c in g.chunk_contexts for n in g.chunk_tokens]
    out += [Step("mixed", ((n, 0),), b, g.mixed_context) for n in g.mixed_prefills for b in g.mixed_batches]
    return out


def measurement_seconds(step_s: float, target_s: float) -> float:
    """The most one measurement of a closure taking ``step_s`` costs (backend.repeat_timing)."""
    reps = int(min(MAX_REPS, max(MIN_REPS, target_s / max(step_s, 1e-9))))
    return (WARMUP + 1 + reps) * step_s


def planned_seconds(step_us: list[float], target_s: float) -> float:
    """The timing budget of steps estimated at ``step_us`` each."""
    return sum(measurement_seconds(t / 1e6, target_s) for t in step_us)
