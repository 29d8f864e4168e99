"""Checks of the cluster that need more than one config section: each engine (``cluster.engine``, or a pool's
merged engine) against vLLM's own limits, its model and its hardware, as distsim.cluster.pools resolves the
pools.

Each raises :class:`distsim.errors.ConfigError` naming the dotted key, or warns with
:func:`distsim.errors.warn_config` about a legal but suspicious combination. The sections' own settings
are distsim.cluster.settings'; the small validators, distsim.validators.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from distsim.errors import ConfigError, warn_config

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.catalog import HardwareSpec, ModelSpec
    from distsim.instance.instance import EngineParams

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's --block-size choices

# a rule's check: need(holds, engine sub-key, the rule, the value given) raises ConfigError unless it holds
Need = Callable[[bool, str, str, object], None]


def engine(engine: DictConfig, key: str) -> None:
    """``cluster.engine`` (or a pool's merged engine) against vLLM's own limits."""

    def need(cond: bool, sub: str, rule: str, value: object) -> None:
        if not cond:
            raise ConfigError(f"{key}.{sub}", f"{rule} (got {value!r})")

    need(engine.tensor_parallel_size >= 1, "tensor_parallel_size", "must be >= 1", engine.tensor_parallel_size)
    need(engine.data_parallel_size >= 1, "data_parallel_size", "must be >= 1", engine.data_parallel_size)
    need(engine.max_num_seqs >= 1, "max_num_seqs", "must be >= 1", engine.max_num_seqs)
    need(engine.max_num_batched_tokens >= 1, "max_num_batched_tokens", "must be >= 1", engine.max_num_batched_tokens)
    need(
        engine.max_num_batched_tokens >= engine.max_num_seqs,
        "max_num_batched_tokens",
        f"must be >= max_num_seqs ({engine.max_num_seqs}), as vLLM requires",
        engine.max_num_batched_tokens,
    )
    need(engine.block_size in BLOCK_SIZES, "block_size", f"must be one of {', '.join(map(str, BLOCK_SIZES))}, as vLLM allows", engine.block_size)
    need(engine.max_model_len is None or engine.max_model_len >= 1, "max_model_len", "must be >= 1 or null", engine.max_model_len)
    need(0.0 < engine.gpu_memory_utilization <= 1.0, "gpu_memory_utilization", "must be in (0, 1]", engine.gpu_memory_utilization)
    need(
        0.0 <= engine.activation_reserve_fraction < 1.0,
        "activation_reserve_fraction",
        "must be in [0, 1)",
        engine.activation_reserve_fraction,
    )
    need(engine.total_kv_blocks is None or engine.total_kv_blocks >= 1, "total_kv_blocks", "must be >= 1 or null", engine.total_kv_blocks)
    need(isinstance(engine.async_scheduling, bool), "async_scheduling", "must be true or false", engine.async_scheduling)
    waiting_queue(engine, need)
    cpu = engine.cpu_kv_blocks
    need(
        not isinstance(cpu, bool) and isinstance(cpu, int) and cpu >= 0,
        "cpu_kv_blocks",
        "must be a non-negative integer: the CPU KV tier's size in blocks, 0 for none",
        cpu,
    )
    need(
        cpu == 0 or engine.enable_prefix_caching,
        "cpu_kv_blocks",
        "needs enable_prefix_caching=true: the CPU KV tier finds blocks by their content hashes, as vLLM's "
        "KV offloading does; set cpu_kv_blocks=0 or enable prefix caching",
        cpu,
    )
    prefill_batching(engine, need)


def waiting_queue(engine: DictConfig, need: Need) -> None:
    """The waiting queue's order and its aging (distsim/instance/queues/)."""
    from distsim.instance.queues.registry import QUEUES

    need(engine.scheduler in QUEUES, "scheduler", f"must be one of {', '.join(sorted(QUEUES))}", engine.scheduler)
    aging = engine.scheduler_aging_per_s
    need(
        not isinstance(aging, bool) and isinstance(aging, (int, float)) and math.isfinite(aging) and aging >= 0,
        "scheduler_aging_per_s", "must be a finite number >= 0", aging,
    )  # fmt: skip
    need(aging == 0 or engine.scheduler != "fcfs", "scheduler_aging_per_s",
         "ages an ordered queue (scheduler priority, shortest_prompt or predicted_output); fcfs needs 0", aging)  # fmt: skip
    sigma = engine.output_prediction_sigma
    need(
        not isinstance(sigma, bool) and isinstance(sigma, (int, float)) and math.isfinite(sigma) and 0 <= sigma <= 10,
        "output_prediction_sigma", "must be a number from 0 (an oracle) to 10: the predictor's log-space error", sigma,
    )  # fmt: skip


def prefill_batching(engine: DictConfig, need: Need) -> None:
    """Windowed prefill batching's two keys (distsim/instance/batching.py)."""
    window, least = engine.prefill_batch_window_ms, engine.prefill_batch_min
    need(
        window is None or (not isinstance(window, bool) and isinstance(window, (int, float)) and 0 <= window < math.inf),
        "prefill_batch_window_ms",
        "must be a finite number of milliseconds >= 0, or null for continuous batching",
        window,
    )
    need(
        least is None or (not isinstance(least, bool) and isinstance(least, int) and least >= 1),
        "prefill_batch_min",
        "must be an integer >= 1 (requests), or null",
        least,
    )
    need(
        least is None or window is not None,
        "prefill_batch_min",
        "needs prefill_batch_window_ms: without a window a batch short of its min would wait forever",
        least,
    )
    need(
        least is None or least <= engine.max_num_seqs,
        "prefill_batch_min",
        f"must be <= max_num_seqs ({engine.max_num_seqs}): a batch could never start that many",
        least,
    )


def tp_within_node(tp: int, hardware: HardwareSpec, gpus_per_node: int | None, engine_key: str, dp: int = 1) -> None:
    """Tensor parallelism stays inside one node's GPU link (NVLink or PCIe): the step model costs the
    all-reduce on that link only, so a TP group that would cross the network is refused. An instance
    with data_parallel_size > 1 is one vLLM server whose tp x dp GPUs share a node (vLLM's single-node
    DP, as the real runs used), so those must fit too."""
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ConfigError("cluster.gpus_per_node", f"must be >= 1 or null (got {gpus_per_node})")
    per_node = gpus_per_node or hardware.gpus_per_node
    if tp > per_node:
        raise ConfigError(
            f"{engine_key}.tensor_parallel_size",
            f"{tp} GPUs do not fit in one {hardware.name} node ({per_node} GPUs joined by its "
            f"{hardware.link_gbps_per_dir:g} GB/s link); tensor parallelism across nodes is not modelled: "
            "use more instances, or set cluster.gpus_per_node if your nodes join more GPUs (e.g. 72 for GB200 NVL72)",
        )
    if tp * dp > per_node:
        raise ConfigError(
            f"{engine_key}.data_parallel_size",
            f"{dp} replicas x tensor_parallel_size {tp} = {tp * dp} GPUs do not fit in one {hardware.name} node "
            f"({per_node} GPUs); one vLLM server with data parallelism is modelled on one node: "
            "use more instances (cluster.instances or a pool's count) instead, or set cluster.gpus_per_node",
        )


def max_model_len(engine: DictConfig, model: ModelSpec, engine_key: str) -> int | None:
    """vLLM's max_model_len: the user's, at most the model's context length, which is the default.
    Without chunked prefill a whole prompt must fit in one step's token budget, so vLLM refuses a
    budget below it."""
    context = model.max_position_embeddings or None
    limit = engine.max_model_len if engine.max_model_len is not None else context
    if context is not None and limit > context:
        raise ConfigError(
            f"{engine_key}.max_model_len",
            f"{limit} is longer than {model.name}'s context length ({context} tokens, max_position_embeddings)",
        )
    if not engine.enable_chunked_prefill:
        if limit is None:
            raise ConfigError(
                f"{engine_key}.max_model_len",
                f"must be set when enable_chunked_prefill is false ({model.name} gives no max_position_embeddings)",
            )
        if engine.max_num_batched_tokens < limit:
            raise ConfigError(
                f"{engine_key}.max_num_batched_tokens",
                f"{engine.max_num_batched_tokens} is below max_model_len ({limit}) with enable_chunked_prefill=false: "
                "a prompt must then fit in one step, so vLLM refuses this; raise max_num_batched_tokens, lower "
                "max_model_len, or enable chunked prefill",
            )
    return limit


def one_sequence_fits(
    params: EngineParams, engine_key: str, engine: DictConfig, model: ModelSpec, hardware: HardwareSpec, gpus_per_node: int | None
) -> None:
    """vLLM refuses to start when one max_model_len sequence does not fit in the KV cache it sizes from
    memory (its check_enough_kv_cache_memory): so does distsim, on whole GPUs and MIG slices alike,
    advising only what would make it fit. An explicit total_kv_blocks is vLLM's num_gpu_blocks_override,
    applied after that check: distsim then runs, drops the requests that can never fit, and says so."""
    from distsim.catalog.capacity import advice, memory_remedies

    capacity = params.total_kv_blocks * params.block_size
    if params.max_model_len is None or params.max_model_len <= capacity:
        return
    what = "max_model_len" if engine.max_model_len is not None else f"max_model_len, {model.name}'s context length"
    head = f"{params.max_model_len} tokens ({what}) do not fit in the KV cache ({params.total_kv_blocks} blocks, {capacity} tokens)"
    if engine.total_kv_blocks is not None:
        warn_config(f"{engine_key}.max_model_len", f"{head}: vLLM would refuse to start; requests longer than the cache are dropped")
        return
    remedies = memory_remedies(model, hardware, engine, params.max_model_len, gpus_per_node)
    raise ConfigError(
        f"{engine_key}.max_model_len",
        f"{head} that {hardware.name} leaves at gpu_memory_utilization={engine.gpu_memory_utilization:g}: vLLM refuses "
        f"to start; {advice(remedies, f'set max_model_len to at most {capacity}')}",
    )


def expert_parallel(enabled: bool, model: ModelSpec, engine_key: str, tp: int = 1, dp: int = 1) -> None:
    """vLLM accepts enable_expert_parallel for a dense model and ignores it; distsim does too, but says so.
    With one data-parallel engine vLLM places whole experts on the tensor-parallel ranks but keeps the
    all-reduce (its all-to-all kernels need data_parallel_size > 1: FusedMoEParallelConfig.use_all2all_kernels):
    each GPU holds, reads and computes the same expected share of the experts as under tensor parallelism
    (routing taken as uniform), so the model gives the same step times and KV cache, and says so."""
    if not enabled:
        return
    if not model.is_moe:
        warn_config(
            f"{engine_key}.enable_expert_parallel",
            f"{model.name} has no experts (not a mixture-of-experts model): the flag has no effect",
        )
    elif dp == 1:
        where = (
            "one GPU holds every expert"
            if tp == 1
            else f"vLLM places {model.name}'s experts whole on the {tp} tensor-parallel GPUs but keeps the all-reduce "
            "(its all-to-all kernels need data_parallel_size > 1), so each GPU holds, reads and computes the same "
            "share of the experts as with plain tensor parallelism"
        )
        warn_config(
            f"{engine_key}.enable_expert_parallel",
            f"with data_parallel_size 1 the flag changes nothing: {where}; set data_parallel_size > 1 for expert "
            "parallelism across engines",
        )
