"""Assemble a :class:`Cluster` from resolved settings: instances, signal board, router views, policies.

Everything here was checked by :func:`distsim.resolve.resolve`; assembly only wires objects
together, so it raises nothing a user could cause. Each policy draws from its own named random stream
("router", or "router/prefill" and "router/decode" under P/D, and "admission"; a cell's own, e.g.
"router/cell/17", see distsim.cells.build).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from distsim.cluster.cluster import NO_FRONTEND, Cluster, RecordSink, Routes
from distsim.cluster.hedging import Hedger
from distsim.cluster.mig import instance_slices, price_per_hour
from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
from distsim.events.loop import EventLoop
from distsim.events.rng import stream
from distsim.instance.cpu_kv import CpuKvTier
from distsim.instance.instance import Instance
from distsim.instance.pipeline.partition import stage_layers
from distsim.instance.storage_kv.tier import StorageKvTier
from distsim.policies.base import PolicyContext
from distsim.policies.settings import PolicyChoice
from distsim.signals.board import SignalBoard
from distsim.signals.prefix_index import PrefixIndex
from distsim.signals.settings import SignalSettings
from distsim.signals.view import ClusterView, RouterState
from distsim.workload.settings import SloDefaults

if TYPE_CHECKING:
    from distsim.cluster.pools import PoolSpec
    from distsim.policies.base import Admission, Router

PREFIX_CHUNK_TOKENS = 64  # the router's prefix index keys 64-token chunks, as llm-d's approximate scorer


def build_instances(
    pools: Sequence[PoolSpec], loop: EventLoop, fast_forward: bool, *, first: int = 0, first_group: int = 0,
    instance_cls: type[Instance] = Instance, cancellable: bool = False, seed: int = 0,
) -> tuple[list[Instance], list[PoolSpec]]:
    """One Instance per engine, numbered in pool order from ``first``: a configured instance with
    data_parallel_size N is N consecutive engines sharing one ``dp_group`` (the configured instance's
    number, from ``first_group``); and each engine's pool. ``instance_cls``: Instance, or a subclass such
    as distsim.instance.observed.ObservedInstance when a timeline listens to the steps; ``cancellable``:
    the cluster hedges, so its engines can cancel requests (policy.hedge). A pool that speculates builds
    ``instance_cls`` with the speculative step cycle (distsim.instance.speculative.engine), each engine
    drawing its acceptances from a stream of its own ("speculative/<engine>" under ``seed``). A pool whose
    engines order their queues by predicted output reads the run's one set of predictions (under ``seed``:
    the same for every engine and every routing policy)."""
    instances: list[Instance] = []
    pool_of: list[PoolSpec] = []
    group = first_group
    for pool in pools:
        cls, extra = _engine_class(pool, instance_cls, seed)
        for _ in range(pool.built_count):
            for _ in range(pool.data_parallel_size):
                index = first + len(instances)
                if pool.engine.speculative is not None:
                    extra["rng"] = stream(seed, f"speculative/{index}")
                inst = cls(
                    index,
                    pool.engine,
                    pool.latency,
                    loop,
                    fast_forward=fast_forward,
                    pool=pool.name,
                    role=pool.role,
                    hardware=pool.hardware.name,
                    gpus=pool.tensor_parallel_size * pool.pipeline_parallel_size,
                    dp_group=group,
                    cpu=cpu_tier(pool),
                    cancellable=cancellable,
                    **extra,
                )
                instances.append(inst)
                pool_of.append(pool)
            group += 1
    return instances, pool_of


def _engine_class(pool: PoolSpec, instance_cls: type[Instance], seed: int) -> tuple[type[Instance], dict]:
    """The engine class a pool's features call for, and the constructor arguments they add."""
    cls, extra = instance_cls, {}
    if pool.engine.scheduler == "predicted_output":
        from distsim.instance.queues.output_prediction import OutputPrediction

        extra["output_prediction"] = OutputPrediction.of(seed, pool.engine.output_prediction_sigma)
    if pool.engine.speculative is not None:
        from distsim.instance.speculative.engine import speculative_class

        cls = speculative_class(instance_cls)
    if pool.engine.lora is not None:  # adapter slots (distsim.lora.engine)
        from distsim.lora.engine import lora_class

        cls = lora_class(cls) if cls is instance_cls else _lora_speculative(instance_cls)
    return cls, extra


def _lora_speculative(instance_cls: type[Instance]) -> type[Instance]:
    """An engine that speculates over adapter slots: the speculative cycle over the LoRA engine."""
    from distsim.instance.speculative.engine import speculative_class
    from distsim.lora.engine import lora_class

    return speculative_class(lora_class(instance_cls))


def cpu_tier(pool: PoolSpec) -> CpuKvTier | None:
    """An engine's CPU KV tier (none when cpu_kv_blocks is 0): a block's KV bytes on one GPU, copied over
    that GPU's own PCIe link to the host (each tensor-parallel rank, and each pipeline stage, moves its shard in
    parallel); with its storage tier below it when ``storage_kv`` is set (distsim.instance.storage_kv)."""
    blocks = pool.engine.cpu_kv_blocks
    if not blocks:
        return None
    block_bytes = pool.model.kv_bytes_per_token_per_gpu(pool.tensor_parallel_size) * pool.engine.block_size
    gpu_bytes = block_bytes
    if pool.pipeline_parallel_size > 1:  # a GPU holds its stage's layers of each block: the largest stage's share
        gpu_bytes = block_bytes * max(stage_layers(pool.model.num_layers, pool.pipeline_parallel_size)) / pool.model.num_layers
    tier = CpuKvTier(blocks, gpu_bytes, pool.hardware.host_link_gbps_per_dir * 1e9)
    storage = pool.engine.storage_kv
    if storage is not None:  # one drive per engine: each rank writes and reads its shard of a block there
        tier.storage = StorageKvTier(storage.capacity_blocks, block_bytes * pool.tensor_parallel_size,
                                     storage.read_gbps * 1e9, storage.write_gbps * 1e9, storage.latency_us)
    return tier


def _facts(instances: list[Instance], pool_of: list[PoolSpec], board: SignalBoard) -> dict[str, np.ndarray]:
    """Static per-instance facts a policy may read (view.facts). ``sm_fraction``: the share of its GPUs' SMs
    the instance has (1 on whole GPUs; a MIG slice's profile, e.g. 3/7); ``gpu_fraction``: the share of a
    GPU billed to it (distsim.cluster.mig), so the price is per device."""
    slices = instance_slices(pool_of)
    return {
        "gpus": np.array([inst.gpus for inst in instances], dtype=np.int64),
        "block_size": np.array([inst.bs for inst in instances], dtype=np.int64),
        "price_usd_per_gpu_hour": np.array(price_per_hour(pool_of), dtype=np.float64),
        "total_kv_blocks": board.kv_total,
        "max_num_batched_tokens": np.array([inst.max_tokens for inst in instances], dtype=np.int64),
        "max_num_seqs": np.array([inst.max_seqs for inst in instances], dtype=np.int64),
        "sm_fraction": np.array([s[0].profile.sm_fraction if s else 1.0 for s in slices], dtype=np.float64),
        "gpu_fraction": np.array([s[0].share[s[1]] if s else 1.0 for s in slices], dtype=np.float64),
    }


def _prefix_index(routing: PolicyChoice, instances: list[Instance]) -> PrefixIndex | None:
    if not routing.cls.reads_prefix_index(routing.params):
        return None
    cap = getattr(routing.params, "prefix_index_blocks", None)
    stride = max(1, PREFIX_CHUNK_TOKENS // instances[0].bs)
    return PrefixIndex(len(instances), [cap or inst.kv.total for inst in instances], stride)


def build_routes(
    instances: list[Instance], pool_of: list[PoolSpec], board: SignalBoard, state: RouterState, policy: PolicySettings,
    loop: EventLoop, seed: int, slo: SloDefaults, suffix: str = "",
) -> tuple[Routes, Admission]:
    """The router(s) over their views, and the admission policy over the entry view; ``suffix`` ends
    their stream names (a cell's, e.g. "/cell/17")."""
    routing = policy.routing
    index = _prefix_index(routing, instances)
    facts = _facts(instances, pool_of, board)
    models = [inst.latency for inst in instances]
    extra = {"default_ttft_slo_ms": slo.ttft_ms}

    def group(members: np.ndarray, name: str) -> tuple[ClusterView, Router]:
        view = ClusterView(board, state, loop, members, prefix_index=index, facts=facts, step_models=models)
        return view, routing.cls(routing.params, PolicyContext(int(members.size), stream(seed, name + suffix), seed, extra))

    roles = np.array([inst.role for inst in instances])
    if np.any(roles != "mixed"):  # P/D: resolve_pools checked there is a prefill and a decode pool
        entry_view, router = group(np.flatnonzero(roles == "prefill"), "router/prefill")
        decode_view, decode_router = group(np.flatnonzero(roles == "decode"), "router/decode")
    else:
        entry_view, router = group(np.arange(len(instances)), "router")
        decode_view = decode_router = None
    ctx = PolicyContext(entry_view.n, stream(seed, "admission" + suffix), seed, extra)
    admission = policy.admission.cls(policy.admission.params, ctx)
    return Routes(entry_view, router, decode_view, decode_router, index), admission


def build_cluster(
    pools: Sequence[PoolSpec], policy: PolicySettings, signals: SignalSettings, transfer: TransferSettings,
    loop: EventLoop, recorder: RecordSink, *, seed: int, fast_forward: bool = True, slo: SloDefaults,
    frontend: FrontendSettings | None = None, instance_cls: type[Instance] = Instance,
) -> Cluster:
    """The cluster of ``pools`` behind ``policy``, reading signals as ``signals`` says (built by the world
    builder, distsim.world, unless the cells build a fleet; it then attaches the features); its engines are
    ``instance_cls`` objects."""
    instances, pool_of = build_instances(
        pools, loop, fast_forward, instance_cls=instance_cls, cancellable=policy.hedge.enabled, seed=seed
    )
    return assemble(instances, pool_of, policy, signals, transfer, loop, recorder, seed=seed, slo=slo, frontend=frontend)


def assemble(
    instances: list[Instance], pool_of: list[PoolSpec], policy: PolicySettings, signals: SignalSettings,
    transfer: TransferSettings, loop: EventLoop, recorder: RecordSink | None, *, seed: int, slo: SloDefaults,
    frontend: FrontendSettings | None = None, suffix: str = "",
) -> Cluster:
    """A cluster over ``instances`` (the whole fleet, or one cell's, numbered consecutively) with its own
    signal board, router state, routers, prefix index and admission; ``suffix`` ends their stream names.
    ``recorder`` (the run's; None for a cell's cluster, whose fleet subscribes) is the first to hear of each
    request's final status."""
    board = SignalBoard(instances, signals, loop, stream(seed, "signals" + suffix))
    state = RouterState(len(instances))
    routes, admission = build_routes(instances, pool_of, board, state, policy, loop, seed, slo, suffix)
    if any(policy is not None and policy.reads_signals for policy in (routes.router, routes.decode_router, admission)):
        board.enable_push()  # live or scraped: O(1) pushes per change beat O(instances) pulls per read
    hedger = None
    if policy.hedge.enabled:
        hedger = Hedger(policy.hedge, slo.ttft_ms, instances[0].index, stream(seed, "hedge" + suffix))
    cluster = Cluster(
        instances, pool_of, board, state, routes, admission, policy, transfer, loop, frontend or NO_FRONTEND, hedger,
    )  # fmt: skip
    if recorder is not None:
        cluster.record_listeners.append(recorder.done)
    return cluster
