"""An adapter's bytes, from the model's layer shapes, as vLLM lays LoRA weights out.

vLLM wraps every linear layer of a decoder layer it supports LoRA on (vllm/lora/layers: the packed
``qkv_proj``, ``o_proj``, the packed ``gate_up_proj``, ``down_proj``); each wrapped layer holds, per GPU slot,
A (rank x input) and B (output x rank) per output slice (``create_lora_weights`` in
vllm/lora/layers/base_linear.py; three slices for q, k, v, two for gate and up). Under tensor parallelism
a column-parallel layer (qkv, gate_up) keeps A whole and splits B's outputs; a row-parallel one (o, down)
splits A's inputs and keeps B whole. The slots are allocated at ``max_lora_rank`` for ``max_loras``
adapters when the engine starts, in the model's dtype (vLLM's ``lora_dtype`` auto), out of the memory the
KV cache would otherwise get. An adapter's own file holds the same matrices at its own rank, for the seven
projections (PEFT's all-linear targets, which cover every module vLLM wraps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.catalog import ModelSpec


@dataclass(frozen=True)
class LayerShapes:
    """Per decoder layer and per unit of rank: the A and B elements of the four wrapped linear layers, whole
    and on one of ``tp`` GPUs. A token's shrink and expand multiply through each element once (2 FLOPs)."""

    whole: int  # elements per unit of rank, the whole layer's adapter (an adapter file, a CPU copy)
    per_gpu: float  # ... on one GPU (its share under tensor parallelism)


def layer_shapes(model: ModelSpec, tp: int) -> LayerShapes:
    """The LoRA elements per layer and unit of rank of ``model`` on ``tp`` GPUs (see the module docstring)."""
    h, inter = model.hidden_size, model.intermediate_size
    q = model.num_attention_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    kv_gpu = kv * model.kv_heads_per_gpu(tp) / model.num_kv_heads  # K/V heads replicate when tp exceeds them
    # (A elements, B elements) per unit of rank, whole
    qkv_a, qkv_b = 3 * h, q + 2 * kv
    o_a, o_b = q, h
    gu_a, gu_b = 2 * h, 2 * inter
    down_a, down_b = inter, h
    whole = qkv_a + qkv_b + o_a + o_b + gu_a + gu_b + down_a + down_b
    per_gpu = qkv_a + (q / tp + 2 * kv_gpu) + o_a / tp + o_b + gu_a + gu_b / tp + down_a / tp + down_b
    return LayerShapes(whole, per_gpu)


def adapter_bytes(model: ModelSpec, rank: int) -> int:
    """Bytes of one whole adapter of ``rank`` (what is read from disk into host memory)."""
    return int(model.num_layers * layer_shapes(model, 1).whole * rank * model.dtype_bytes)


def adapter_bytes_per_gpu(model: ModelSpec, tp: int, rank: int) -> float:
    """Bytes of one adapter of ``rank`` on one GPU of ``tp`` (what each GPU copies into its slot)."""
    return model.num_layers * layer_shapes(model, tp).per_gpu * rank * model.dtype_bytes


def slot_bytes_per_gpu(model: ModelSpec, tp: int, max_loras: int, max_lora_rank: int) -> float:
    """The GPU memory vLLM allocates for the adapter slots on each GPU: max_loras slots at max_lora_rank."""
    return max_loras * adapter_bytes_per_gpu(model, tp, max_lora_rank)
