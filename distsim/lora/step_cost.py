"""What batched adapters add to a step: vLLM's LoRA kernels (the Triton ``lora_shrink`` and ``lora_expand`` of
vllm/lora/ops/triton_ops, Punica's SGMV design) priced by the roofline on the GPU's datasheet figures.

Why this form: each wrapped linear layer (distsim.lora.sizes) runs a shrink (x @ A, to the rank) and an expand
(@ B, back to the output) over the step's tokens, reading the A and B of every distinct adapter the batch uses
from its GPU slot, padded to ``max_lora_rank``. So a step with ``d`` distinct adapters reads ``d`` slots'
bytes (the cost grows with the number of distinct adapters) and computes 2 FLOPs per element per token (it
grows with rank and tokens); a batch without adapters runs none (vLLM captures a CUDA graph without LoRA for
it). The time is the larger of the bytes over the memory bandwidth and the FLOPs over the tensor peak
(datasheet values from the hardware catalog, no efficiency factor: a lower bound). Not priced: the kernels'
fixed launch floor (8 per layer and step: a shrink and an expand for each wrapped layer; no published per-
kernel figure of vLLM's Triton kernels was found).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from distsim.lora.sizes import adapter_bytes_per_gpu, layer_shapes

if TYPE_CHECKING:
    from distsim.lora.settings import LoraSettings
    from distsim.lora.slots import AdapterSlots


class LoraStepCost:
    """The adapter term of a step: microseconds for ``tokens`` over ``distinct`` adapters."""

    def __init__(self, s: LoraSettings):
        self.slot_bytes = adapter_bytes_per_gpu(s.model, s.tp, s.max_lora_rank)
        self.flops_per_token = 2.0 * s.max_lora_rank * s.model.num_layers * layer_shapes(s.model, s.tp).per_gpu
        self.hbm_bps, self.peak_flops = s.hbm_bps, s.peak_flops

    def us(self, tokens: int, distinct: int) -> int:
        if not distinct:
            return 0
        seconds = max(distinct * self.slot_bytes / self.hbm_bps, tokens * self.flops_per_token / self.peak_flops)
        return round(seconds * 1e6)


class LoraStepTime:
    """An engine's step model with the adapter term added (the engine's own object: the distinct adapters
    are its running batch's). What the engine does not call goes to the model it wraps."""

    def __init__(self, base: Any, slots: AdapterSlots, cost: LoraStepCost):
        self.base, self.slots, self.cost = base, slots, cost

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def step_time(self, pf_tokens: int, pf_pairs: int, pf_kv: int, decode_seqs: int, decode_ctx: int, chunks: int) -> int:
        dur = self.base.step_time(pf_tokens, pf_pairs, pf_kv, decode_seqs, decode_ctx, chunks)
        return dur + self.cost.us(pf_tokens + decode_seqs, len(self.slots.pins))

    def decode_run_ends(self, decode_seqs: int, decode_ctx0: int, count: int, begin_us: int):
        """A run's steps keep their batch, so each adds the same adapter term."""
        ends = self.base.decode_run_ends(decode_seqs, decode_ctx0, count, begin_us)
        extra = self.cost.us(decode_seqs, len(self.slots.pins))
        if not extra:
            return ends
        return array("q", (end + extra * (i + 1) for i, end in enumerate(ends)))
