"""The step model of a pipelined replica: one engine step is a round of up to ``P`` micro-batches through the
``P`` stages, priced by the configured step model per stage and composed by the stage-time algebra.

Why a round: vLLM V1's batch queue keeps up to ``P`` micro-batches in flight, each scheduled from the
sequences not already in flight, so in steady state the running sequences fall into ``m = min(P, sequences)``
micro-batches that circulate, each advancing its sequences by one token (or one prefill chunk) per pass. The
engine's step is that pass for all of them: its batch is split into ``m`` equal micro-batches (the fields of
the step's shape divided by ``m``, rounded up: the largest of them), and the step takes
:func:`~distsim.instance.pipeline.timing.cycle_us` of their stage times and sends. One request alone is one
micro-batch: ``S + C``, the bubble (every other stage idle). What this leaves out: tokens of the ``m``
micro-batches come out together at the round's end (in vLLM a micro-batch's tokens are out as it leaves the
last stage, up to ``(m - 1)`` stage times earlier), and a new request joins at a round's end.

A stage's time: the configured model prices the micro-batch over the whole model (``T``) and over a one-layer
model of the same architecture with its embedding and LM head (``T1``, as the speculative heads are priced);
per layer ``a = (T - T1) / (L - 1)``, the rest ``T1 - a`` (host work, embedding, LM head, sampling) is the last
stage's; stage ``k`` takes ``L_k * a`` (+ the rest on the last stage), so the stages sum to ``T``. The linear
model has no architecture: its ``T`` is split by layers.

The send at each boundary: the hidden states and the residual (vLLM's ``IntermediateTensors`` of its decoder
models) of each micro-batch token, at the activation dtype, each TP rank sending its 1/TP slice
(``send_tensor_dict`` over the TP group) over the boundary's link: the node's GPU link when both stages sit in
one node, the network beyond; a fixed latency each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distsim.instance.latency.base import LatencyModel, StepShape
from distsim.instance.pipeline.timing import cycle_us

ACTIVATION_TENSORS = 2  # hidden_states and residual, what vLLM's decoder models pass between stages


@dataclass(frozen=True)
class StageLinks:
    """Each stage boundary's send: fixed latency (us) and microseconds per micro-batch token."""

    latency_us: tuple[float, ...]
    us_per_token: tuple[float, ...]

    def send_us(self, tokens: int) -> list[float]:
        return [lat + tokens * per for lat, per in zip(self.latency_us, self.us_per_token)]


class PipelineLatency(LatencyModel):
    """A round of micro-batches through the stages (see the module docstring)."""

    def __init__(self, whole: LatencyModel, one_layer: LatencyModel | None, layers: tuple[int, ...], links: StageLinks):
        self.whole = whole
        self.one_layer = one_layer  # None: split the whole step by layers (a model without architecture)
        self.layers = layers
        self.stages = len(layers)
        self.total_layers = sum(layers)
        self.links = links

    def stage_times(self, shape: StepShape) -> list[float]:
        """Each stage's time over one micro-batch of this shape."""
        whole = float(self.whole.step_us(shape))
        if self.one_layer is None:
            per_layer, rest = whole / self.total_layers, 0.0
        else:
            one = float(self.one_layer.step_us(shape))
            per_layer = (whole - one) / (self.total_layers - 1)
            rest = one - per_layer
        times = [n * per_layer for n in self.layers]
        times[-1] += rest
        return times

    def micro_batch(self, shape: StepShape) -> tuple[StepShape, int]:
        """The largest of the ``m`` equal micro-batches a step of this shape splits into, and ``m``."""
        m = min(self.stages, shape.sequences)
        if m <= 1:
            return shape, 1
        return StepShape(*(-(-value // m) for value in shape)), m

    def step_us(self, shape: StepShape) -> int:
        mb, m = self.micro_batch(shape)
        sends = self.links.send_us(mb.prefill_tokens + mb.decode_seqs)
        return int(cycle_us(self.stage_times(mb), sends, m) + 0.5)

    def decode_steps_us(self, decode_seqs: int, decode_ctx0: int, count: int) -> np.ndarray:
        return np.array(
            [self.step_us(StepShape(0, 0, 0, decode_seqs, decode_ctx0 + j * decode_seqs)) for j in range(count)],
            dtype=np.int64,
        )
