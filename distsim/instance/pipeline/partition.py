"""Which layers each pipeline stage holds, and the KV blocks a pipelined replica has (its stages' memory).

vLLM's partition (vllm/distributed/utils.py, ``get_pp_indices``): every stage gets ``layers // pp`` layers and
the ``layers % pp`` left over go one each to the stages counted back from the second-to-last (the last stage
is spared: it also runs the final norm, the LM head and sampling). The first stage holds the input
embedding, the last the LM head (and, when the model ties them, its own copy of the embedding table, as
vLLM's models build it on the last rank).

Each stage sizes its KV cache from its own memory (weights of its layers, KV of its layers), as each vLLM
worker profiles its own; the engine takes the smallest count of all workers, so the replica's block count
is the fewest blocks any stage can hold.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from distsim.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.catalog import HardwareSpec, ModelSpec


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Decoder layers per stage, first to last, as vLLM's default partition gives them."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_weight_bytes(model: ModelSpec, tp: int, layers: tuple[int, ...], expert_dp: int = 1) -> list[float]:
    """Weight bytes on each GPU of each stage: its layers' share of the decoder weights, the embedding on the
    first stage, the LM head on the last (a tied table: the embedding again)."""
    embed = model.embed_params * model.dtype_bytes / tp
    head = model.lm_head_params * (model.lm_head_weight_bytes or model.dtype_bytes) / tp
    decoder = model.weight_bytes_per_gpu(tp, expert_dp) - embed - head
    last_head = embed if model.tie_word_embeddings else head
    total = sum(layers)
    out = [decoder * n / total for n in layers]
    out[0] += embed
    out[-1] += last_head
    return out


def stage_kv_blocks(model: ModelSpec, hw: HardwareSpec, engine: DictConfig, tp: int, layers: tuple[int, ...],
                    key: str) -> int:
    """KV blocks of a pipelined replica: each stage's floor((usable - its weights - its windows) / (block x its
    layers' KV per token)), the smallest over the stages (vLLM's engine takes the minimum over its workers)."""
    expert_dp = engine.data_parallel_size if engine.enable_expert_parallel else 1
    util, reserve = float(engine.gpu_memory_utilization), float(engine.activation_reserve_fraction)
    available = hw.memory_bytes * (util - reserve)
    total = sum(layers)
    blocks = []
    for k, (n, weights) in enumerate(zip(layers, stage_weight_bytes(model, tp, layers, expert_dp))):
        share = n / total
        windows = engine.max_num_seqs * model.kv_window_bytes_per_seq_per_gpu(tp) * share
        per_block = engine.block_size * model.kv_bytes_per_token_per_gpu(tp) * share
        usable = available - weights - windows
        if usable <= 0:
            raise ConfigError(
                f"{key}.pipeline_parallel_size",
                f"model {model.name} does not fit on {hw.name} at tensor_parallel_size={tp} x pipeline_parallel_size="
                f"{len(layers)}: stage {k} ({n} layers) needs {weights / 2**30:.1f} GiB of weights per GPU but only "
                f"{available / 2**30:.1f} GiB are available; raise pipeline_parallel_size or tensor_parallel_size",
            )
        blocks.append(math.floor(usable / per_block))
    return min(blocks)
