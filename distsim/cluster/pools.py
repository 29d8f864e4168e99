"""Resolve ``cluster`` config into pools of identical instances, validating every engine value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from distsim.autoscale.settings import resolve_autoscale
from distsim.catalog.capacity import resident_bytes_per_gpu
from distsim.cluster import checks
from distsim.cluster.footprint import check_instances_fit
from distsim.cluster.mig import check_fits, place_pools, refuse_with_cells, resolve_mig
from distsim.errors import ConfigError
from distsim.instance.instance import EngineParams
from distsim.instance.latency.base import LatencyContext, LatencyModel
from distsim.instance.latency.build import build_latency_model
from distsim.instance.pipeline.settings import pipelined, refuse_unmodelled, resolve_pipeline
from distsim.instance.speculative.settings import resolve_speculative
from distsim.instance.storage_kv.settings import resolve_storage_kv
from distsim.lora.settings import resolve_lora
from distsim.typed_merge import merge_onto

if TYPE_CHECKING:
    from distsim.autoscale.settings import AutoscaleSettings
    from distsim.catalog import HardwareSpec, ModelSpec
    from distsim.cluster.mig import MigSlices

# A pool as written: a node of cluster.pools, or the implicit pool of cluster.instances (a dict); its values
# are the user's, checked here one by one.
RawPool = Mapping[str, Any]

ROLES = ("mixed", "prefill", "decode")


@dataclass
class PoolSpec:
    name: str
    count: int
    role: str
    hardware: HardwareSpec
    model: ModelSpec
    tensor_parallel_size: int
    engine: EngineParams
    latency: LatencyModel
    key: str  # config path of this pool, for messages
    data_parallel_size: int = 1  # engines per instance, behind vLLM's balancer (distsim.cluster.data_parallel)
    autoscale: AutoscaleSettings | None = None  # None: a fixed pool of ``count``
    mig: MigSlices | None = None  # one instance per slice (``hardware`` is the slice's); None: whole GPUs
    pipeline_parallel_size: int = 1  # stages per replica (distsim.instance.pipeline): tp x pp GPUs each
    resident_bytes_per_gpu: float = 0.0  # weights, activation reserve, windows: memory besides the KV blocks

    @property
    def built_count(self) -> int:
        """Instances to build: an autoscaled pool builds its ``max`` (``count`` of them serve at first)."""
        return self.autoscale.max_replicas if self.autoscale is not None else self.count


def _raw_pools(cluster: DictConfig) -> tuple[list[RawPool], list[str]]:
    """The pools as written (one implicit pool of ``cluster.instances`` when ``cluster.pools`` is
    null) and each one's config path."""
    if cluster.pools is None:
        if cluster.instances < 1:
            raise ConfigError("cluster.instances", f"must be >= 1 (got {cluster.instances})")
        raw = {"name": "default", "count": cluster.instances, "hardware": None, "role": "mixed", "engine": {}, "latency": {},
               "autoscale": cluster.get("autoscale"), "mig": cluster.get("mig")}
        return [raw], ["cluster"]
    if len(cluster.pools) == 0:
        raise ConfigError("cluster.pools", "is empty: give at least one pool, or null for cluster.instances")
    if cluster.get("autoscale") is not None and cluster.autoscale.get("kind") is not None:
        raise ConfigError(
            "cluster.autoscale.kind", "autoscales the single pool of cluster.instances; with cluster.pools set, "
            "give each pool its own autoscale"
        )
    if cluster.get("mig") is not None and cluster.mig.get("profile") is not None:
        raise ConfigError(
            "cluster.mig.profile", "slices the single pool of cluster.instances; with cluster.pools set, give each "
            "pool its own mig.profile"
        )
    return list(cluster.pools), [f"cluster.pools[{i}]" for i in range(len(cluster.pools))]


def _check_pool(raw: RawPool, key: str, names: set[str]) -> None:
    if raw["name"] in names:
        raise ConfigError(f"{key}.name", f"pool name {raw['name']!r} used twice")
    names.add(raw["name"])
    if raw["count"] < 1:
        raise ConfigError(f"{key}.count", f"must be >= 1 (got {raw['count']})")
    if raw["role"] not in ROLES:
        raise ConfigError(f"{key}.role", f"must be one of {', '.join(ROLES)} (got {raw['role']!r})")


def _engine_params(engine: DictConfig, model: ModelSpec, hardware: HardwareSpec, engine_key: str, gpus_per_node: int | None,
                   stages: tuple[int, ...] | None = None) -> EngineParams:
    """The instance's engine settings, with the KV capacity derived when not given (from each pipeline stage's
    memory when ``stages`` gives their layers)."""
    from distsim.catalog.capacity import derive_total_kv_blocks
    from distsim.instance.pipeline.partition import stage_kv_blocks

    total_blocks = engine.total_kv_blocks
    max_len = checks.max_model_len(engine, model, engine_key)
    if total_blocks is None and stages is not None:
        model.check_tensor_parallel(engine.tensor_parallel_size, f"{engine_key}.tensor_parallel_size")
        total_blocks = stage_kv_blocks(model, hardware, engine, engine.tensor_parallel_size, stages, engine_key)
    elif total_blocks is None:
        total_blocks = derive_total_kv_blocks(model, hardware, engine, engine_key, gpus_per_node, max_len)
    params = EngineParams(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        block_size=engine.block_size,
        total_kv_blocks=int(total_blocks),
        enable_chunked_prefill=bool(engine.enable_chunked_prefill),
        enable_prefix_caching=bool(engine.enable_prefix_caching),
        scheduler_reserve_full_isl=bool(engine.scheduler_reserve_full_isl),
        async_scheduling=bool(engine.async_scheduling),
        scheduler=engine.scheduler,
        scheduler_aging_per_s=float(engine.scheduler_aging_per_s),
        output_prediction_sigma=float(engine.output_prediction_sigma),
        max_model_len=max_len,
        cpu_kv_blocks=int(engine.cpu_kv_blocks),
        prefill_batch_min=engine.prefill_batch_min,
        prefill_batch_window_us=round((engine.prefill_batch_window_ms or 0.0) * 1000),
    )
    checks.one_sequence_fits(params, engine_key, engine, model, hardware, gpus_per_node)
    return params


def _resolve_pool(cluster: DictConfig, raw: RawPool, key: str, model: ModelSpec) -> PoolSpec:
    from distsim.catalog import load_hardware

    engine_key = "cluster.engine" if key == "cluster" else f"{key}.engine"
    engine = merge_onto(cluster.engine, raw.get("engine"), engine_key)
    latency_cfg = merge_onto(cluster.latency, raw.get("latency"), "cluster.latency" if key == "cluster" else f"{key}.latency")
    checks.engine(engine, engine_key)
    hardware = load_hardware(raw.get("hardware") or cluster.hardware, f"{key}.hardware" if raw.get("hardware") else "cluster.hardware")
    tp, dp = engine.tensor_parallel_size, engine.data_parallel_size
    checks.tp_within_node(tp, hardware, cluster.gpus_per_node, engine_key, dp)
    mig = resolve_mig(raw.get("mig"), hardware, f"{key}.mig", tp, dp, engine_key)
    if mig is not None:  # the instance runs on the slice: the GPU scaled by the profile
        # the weights and one max_model_len sequence must fit the cache vLLM sizes; an explicit total_kv_blocks
        # (num_gpu_blocks_override) is checked against max_model_len as on whole GPUs (one_sequence_fits)
        max_len = checks.max_model_len(engine, model, engine_key) if engine.total_kv_blocks is None else None
        hardware = check_fits(model, hardware, mig, engine, max_len, f"{key}.mig.profile", engine_key)
    pipeline = resolve_pipeline(engine, engine_key, model, hardware, tp, cluster.gpus_per_node)
    if pipeline is not None:
        refuse_unmodelled(engine_key, raw["role"], engine.speculative.method not in (None, "none"), mig is not None, dp)
    params = _engine_params(engine, model, hardware, engine_key, cluster.gpus_per_node,
                            None if pipeline is None else pipeline.layers)
    ep = bool(engine.enable_expert_parallel)
    checks.expert_parallel(ep, model, engine_key, tp, dp)
    latency_ctx = LatencyContext(
        model, hardware, tp, dp, ep, params.max_num_seqs, params.max_num_batched_tokens, params.async_scheduling
    )
    params, latency_ctx = _with_speculative(params, latency_ctx, engine, engine_key, latency_cfg, cluster.model,
                                            raw["role"])
    storage = resolve_storage_kv(engine.get("storage_kv"), f"{engine_key}.storage_kv",
                                 model.kv_bytes_per_token_per_gpu(tp) * tp * params.block_size, params.cpu_kv_blocks)
    if storage is not None:
        params = replace(params, storage_kv=storage)
    params = _with_lora(params, engine, f"{engine_key}.lora", model, hardware, tp)
    latency = build_latency_model(latency_cfg, latency_ctx)
    weights = model.weight_bytes_per_gpu(tp, dp if ep else 1)
    if pipeline is not None:  # a step is a round of micro-batches through the stages (distsim.instance.pipeline)
        params, latency, weights = pipelined(pipeline, params, latency, latency_cfg, latency_ctx, cluster.model)
    autoscale = resolve_autoscale(
        raw.get("autoscale"), "cluster.autoscale" if key == "cluster" else f"{key}.autoscale", raw["count"],
        "cluster.instances" if key == "cluster" else f"{key}.count", weights,
    )
    if mig is not None and autoscale is not None:
        raise ConfigError(f"{key}.mig.profile", "autoscaling a pool of MIG slices is not modelled; give a fixed count")
    return PoolSpec(raw["name"], raw["count"], raw["role"], hardware, model, tp, params, latency, key, dp, autoscale, mig,
                    1 if pipeline is None else pipeline.size, resident_bytes_per_gpu(model, hardware, engine, tp, weights))


def _with_speculative(params: EngineParams, latency_ctx: LatencyContext, engine: DictConfig, engine_key: str,
                      latency_cfg: DictConfig, model_name, role: str) -> tuple[EngineParams, LatencyContext]:
    """The engine and step-model context with speculative decoding (distsim.instance.speculative), when on."""
    speculative = resolve_speculative(engine.get("speculative"), f"{engine_key}.speculative", latency_cfg, latency_ctx,
                                      model_name)
    if speculative is None:
        return params, latency_ctx
    if role != "mixed":
        raise ConfigError(f"{engine_key}.speculative.method", "speculative decoding is modelled on mixed pools only"
                          " (not under P/D disaggregation)")
    return replace(params, speculative=speculative), replace(latency_ctx, speculative_tokens=speculative.k)


def _with_lora(params: EngineParams, engine: DictConfig, key: str, model: ModelSpec, hardware: HardwareSpec,
               tp: int) -> EngineParams:
    """``params`` with the pool's LoRA settings (distsim.lora), if on: the adapter slots vLLM allocates come
    out of the KV cache (whole blocks, rounded up) when its size is derived, not when given."""
    lora = resolve_lora(engine.get("lora"), key, model, hardware, tp)
    if lora is None:
        return params
    blocks = params.total_kv_blocks
    if engine.total_kv_blocks is None:
        block_bytes = model.kv_bytes_per_token_per_gpu(tp) * params.block_size
        blocks -= -(-int(lora.slot_bytes_per_gpu) // int(block_bytes))
        if blocks < 1:
            raise ConfigError(f"{key}.max_loras", f"the adapter slots ({lora.slot_bytes_per_gpu / 2**30:.2f} GiB per GPU)"
                              " leave no room for the KV cache: lower max_loras or max_lora_rank")
    return replace(params, lora=lora, total_kv_blocks=blocks)


def _check_pools_together(pools: list[PoolSpec]) -> None:
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


def resolve_pools(cluster: DictConfig) -> list[PoolSpec]:
    """Check ``cluster`` and resolve its pools: catalog entries, engine settings, KV capacity, step-time
    model. One implicit pool of ``cluster.instances`` when ``cluster.pools`` is null."""
    from distsim.catalog import load_model

    model = load_model(cluster.model)
    raw_pools, keys = _raw_pools(cluster)
    names: set[str] = set()
    pools = []
    for raw, key in zip(raw_pools, keys):
        if raw.get("kind", "vllm") == "runtime":  # a batching runtime: distsim.runtime.settings resolves it
            continue
        _check_pool(raw, key, names)
        pools.append(_resolve_pool(cluster, raw, key, model))
    _check_pools_together(pools)
    refuse_with_cells(pools, cluster.get("cells"))
    place_pools(pools)  # MIG slices onto GPUs: each slice's GPU and billed share
    engines = sum(p.built_count * p.data_parallel_size for p in pools)  # every DP replica is an engine of its own
    if any(p.data_parallel_size > 1 for p in pools):
        key = "cluster.engine.data_parallel_size"
    else:
        key = "cluster.pools" if cluster.pools else "cluster.instances"
    check_instances_fit(engines, key)
    return pools
