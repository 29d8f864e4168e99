"""Resolve ``cluster`` config into pools of identical instances, validating every engine value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from distsim.cluster.footprint import check_instances_fit
from distsim.errors import ConfigError, warn_config
from distsim.instance.instance import EngineParams
from distsim.instance.latency.base import LatencyContext, LatencyModel, build_latency_model
from distsim.instance.queues import QUEUES

ROLES = ("mixed", "prefill", "decode")
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's --block-size choices


@dataclass
class PoolSpec:
    name: str
    count: int
    role: str
    hardware: Any  # distsim.catalog.HardwareSpec
    model: Any  # distsim.catalog.ModelSpec
    tensor_parallel_size: int
    engine: EngineParams
    latency: LatencyModel
    key: str  # config path of this pool, for messages


def _check_engine(engine: Any, key: str) -> None:
    def need(cond: bool, sub: str, rule: str, value: Any) -> None:
        if not cond:
            raise ConfigError(f"{key}.{sub}", f"{rule} (got {value!r})")

    need(engine.tensor_parallel_size >= 1, "tensor_parallel_size", "must be >= 1", engine.tensor_parallel_size)
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
    need(engine.scheduler in QUEUES, "scheduler", f"must be one of {', '.join(sorted(QUEUES))}", engine.scheduler)


def _check_tp_within_node(tp: int, hardware: Any, gpus_per_node: int | None, engine_key: str) -> None:
    """Tensor parallelism stays inside one node's GPU link (NVLink or PCIe): the step model costs the
    all-reduce on that link only, so a TP group that would cross the network is refused."""
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


def _max_model_len(engine: Any, model: Any, engine_key: str) -> int | None:
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


def _warn_if_one_sequence_cannot_fit(params: EngineParams, engine_key: str) -> None:
    """vLLM refuses to start when one max_model_len sequence cannot fit in the KV cache; distsim runs
    and drops the requests that can never fit, but says so."""
    capacity = params.total_kv_blocks * params.block_size
    if params.max_model_len is not None and params.max_model_len > capacity:
        warn_config(
            f"{engine_key}.max_model_len",
            f"{params.max_model_len} tokens do not fit in the KV cache ({params.total_kv_blocks} blocks, "
            f"{capacity} tokens): vLLM would refuse to start; requests longer than the cache are dropped",
        )


def _merged(base: Any, overrides: Any, key: str) -> DictConfig:
    overrides = overrides or {}
    keys = overrides.keys() if isinstance(overrides, (dict, DictConfig)) else ()
    extra = set(keys) - set(base.keys())
    if extra:
        raise ConfigError(f"{key}.{sorted(extra)[0]}", f"unknown key; known: {', '.join(sorted(base.keys()))}")
    return OmegaConf.merge(base, overrides)


def resolve_pools(cluster: Any) -> list[PoolSpec]:
    """Build the pool specs: one implicit pool of ``cluster.instances`` when ``cluster.pools`` is null."""
    from distsim.catalog import load_hardware, load_model
    from distsim.catalog.capacity import derive_total_kv_blocks

    model = load_model(cluster.model)
    if cluster.pools is None:
        if cluster.instances < 1:
            raise ConfigError("cluster.instances", f"must be >= 1 (got {cluster.instances})")
        raw_pools = [{"name": "default", "count": cluster.instances, "hardware": None, "role": "mixed", "engine": {}, "latency": {}}]
        keys = ["cluster"]
    else:
        if len(cluster.pools) == 0:
            raise ConfigError("cluster.pools", "is empty: give at least one pool, or null for cluster.instances")
        raw_pools = list(cluster.pools)
        keys = [f"cluster.pools[{i}]" for i in range(len(raw_pools))]

    check_instances_fit(sum(int(raw["count"]) for raw in raw_pools), "cluster.pools" if cluster.pools else "cluster.instances")
    pools = []
    names = set()
    for raw, key in zip(raw_pools, keys):
        name = raw["name"]
        if name in names:
            raise ConfigError(f"{key}.name", f"pool name {name!r} used twice")
        names.add(name)
        if raw["count"] < 1:
            raise ConfigError(f"{key}.count", f"must be >= 1 (got {raw['count']})")
        if raw["role"] not in ROLES:
            raise ConfigError(f"{key}.role", f"must be one of {', '.join(ROLES)} (got {raw['role']!r})")
        engine_key = "cluster.engine" if key == "cluster" else f"{key}.engine"
        engine = _merged(cluster.engine, raw.get("engine"), engine_key)
        latency_cfg = _merged(cluster.latency, raw.get("latency"), "cluster.latency" if key == "cluster" else f"{key}.latency")
        _check_engine(engine, engine_key)
        hardware = load_hardware(raw.get("hardware") or cluster.hardware)
        tp = engine.tensor_parallel_size
        _check_tp_within_node(tp, hardware, cluster.gpus_per_node, engine_key)
        total_blocks = engine.total_kv_blocks
        if total_blocks is None:
            total_blocks = derive_total_kv_blocks(model, hardware, engine, key_prefix=engine_key)
        max_model_len = _max_model_len(engine, model, engine_key)
        params = EngineParams(
            max_num_seqs=engine.max_num_seqs,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            block_size=engine.block_size,
            total_kv_blocks=int(total_blocks),
            enable_chunked_prefill=bool(engine.enable_chunked_prefill),
            enable_prefix_caching=bool(engine.enable_prefix_caching),
            scheduler_reserve_full_isl=bool(engine.scheduler_reserve_full_isl),
            scheduler=engine.scheduler,
            max_model_len=max_model_len,
        )
        _warn_if_one_sequence_cannot_fit(params, engine_key)
        latency = build_latency_model(latency_cfg, LatencyContext(model, hardware, tp))
        pools.append(PoolSpec(name, raw["count"], raw["role"], hardware, model, tp, params, latency, key))
    block_sizes = {p.engine.block_size for p in pools}
    if len(block_sizes) > 1:
        raise ConfigError("cluster.engine.block_size", f"all pools must share one block size (got {sorted(block_sizes)})")
    roles = {p.role for p in pools}
    if roles != {"mixed"} and ("mixed" in roles or roles != {"prefill", "decode"}):
        raise ConfigError(
            "cluster.pools",
            "P/D disaggregation needs at least one prefill pool and one decode pool, and no mixed pool "
            f"(got roles {', '.join(sorted(roles))})",
        )
    return pools
