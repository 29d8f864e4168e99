"""The latency-model interface (the registry is registry.py; build.py builds a configured model).

A latency model turns the shape of one engine step into its duration in integer microseconds.
The instance calls :meth:`LatencyModel.step_us` for steps that hold prefill work and
:meth:`LatencyModel.decode_run_ends` for a stretch of decode-only steps that it fast-forwards (the
steps' end times, from :meth:`LatencyModel.decode_steps_us`'s durations). They must agree exactly:
``decode_steps_us(b, ctx0, n)[j] == step_us(StepShape(0, 0, 0, b, ctx0 + j*b))`` (a test checks every
registered model). Rounding is ``floor(x + 0.5)`` in both.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


class StepShape(NamedTuple):
    """What one engine step computes.

    prefill_tokens      prompt tokens computed in this step (sum of the prefill chunks)
    prefill_attn_pairs  query-key pairs of prefill attention: per chunk of n tokens after c0 cached or
                        computed tokens, n*c0 + n*(n+1)/2
    prefill_kv_tokens   KV tokens the prefill chunks read or write: per chunk c0 + n
    decode_seqs         sequences that decode one token in this step
    decode_ctx          KV tokens the decoding sequences attend to (sum of their context lengths)
    prefill_seqs        prefill chunks in the step (one per sequence; 0 when unknown and the step
                        has prefill tokens: counted as one)
    """

    prefill_tokens: int
    prefill_attn_pairs: int
    prefill_kv_tokens: int
    decode_seqs: int
    decode_ctx: int
    prefill_seqs: int = 0

    @property
    def sequences(self) -> int:
        """Sequences scheduled in the step (a prefill chunk with an unknown count counts as one)."""
        p = self.prefill_seqs or (1 if self.prefill_tokens else 0)
        return self.decode_seqs + p


class LatencyModel:
    """Base class: subclasses implement both methods with the same arithmetic."""

    def step_us(self, shape: StepShape) -> int:
        raise NotImplementedError

    def step_time(
        self, prefill_tokens: int, prefill_attn_pairs: int, prefill_kv_tokens: int, decode_seqs: int, decode_ctx: int,
        prefill_seqs: int,
    ) -> int:
        """``step_us`` of the step with these fields (what the instance calls: models may skip the tuple)."""
        return self.step_us(
            StepShape(prefill_tokens, prefill_attn_pairs, prefill_kv_tokens, decode_seqs, decode_ctx, prefill_seqs)
        )

    def decode_steps_us(self, decode_seqs: int, decode_ctx0: int, count: int) -> np.ndarray:
        """Durations (int64 microseconds) of ``count`` decode-only steps of ``decode_seqs`` sequences,
        the j-th attending to ``decode_ctx0 + j * decode_seqs`` KV tokens."""
        raise NotImplementedError

    def decode_steps(self, decode_seqs: int, decode_ctx0: int, count: int) -> list[int]:
        """The same durations as a list."""
        return self.decode_steps_us(decode_seqs, decode_ctx0, count).tolist()

    def decode_run_ends(self, decode_seqs: int, decode_ctx0: int, count: int, begin_us: int) -> MutableSequence[int]:
        """End times of those ``count`` steps run back to back from ``begin_us``: what the instance uses
        (a run's end, where an arrival cuts it, which steps have started at an instant), a list or an
        ``array("q")``. Models may override it with a plain loop into a list, which beats numpy's per-call
        cost for the short runs that dominate (tens of steps); a long run is an array of 8 bytes a step,
        not a list of int objects (a run is planned to its earliest end, often hundreds of steps, and on
        a fleet of 100,000 instances most of them hold one)."""
        ends = self.decode_steps_us(decode_seqs, decode_ctx0, count)
        np.cumsum(ends, out=ends)
        ends += begin_us
        return array("q", ends.astype(np.int64, copy=False).tobytes())


@dataclass(frozen=True)
class LatencyContext:
    """What a latency model may be built from: the resolved catalog entries and engine settings."""

    model: Any  # distsim.catalog.ModelSpec
    hardware: Any  # distsim.catalog.HardwareSpec
    tensor_parallel_size: int
    data_parallel_size: int = 1  # engines of one vLLM server (with expert parallelism they share the experts)
    expert_parallel: bool = False  # vLLM's enable_expert_parallel: experts spread over the tp x dp GPUs
    max_num_seqs: int = 256  # the engine's: its CUDA-graph capture sizes follow from them (serving.py)
    max_num_batched_tokens: int = 2048
    async_scheduling: bool = True  # vLLM's --async-scheduling: host work overlaps the GPU step
    speculative_tokens: int = 0  # drafts per sequence per step (speculative decoding): the capture sizes follow


LatencyFactory = Callable[[Any, LatencyContext], LatencyModel]
