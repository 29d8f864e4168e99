"""Wire the runtime pools beside the LLM cluster: replicas numbered after the cluster's instances, one route
per request type (signal board, router state, view, the configured router on stream "router/TYPE"), and the
front that sends each request by its type. Everything was checked by resolve; this only wires."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distsim.cluster.build import PREFIX_CHUNK_TOKENS
from distsim.cluster.cluster import Cluster
from distsim.cluster.settings import PolicySettings
from distsim.events.loop import EventLoop
from distsim.events.rng import stream
from distsim.policies.base import PolicyContext
from distsim.protocols import RecordSink
from distsim.runtime.front import TypedFront, TypeRoute
from distsim.runtime.replica import RuntimeReplica
from distsim.runtime.settings import RuntimePoolSpec
from distsim.signals.board import SignalBoard
from distsim.signals.prefix_index import PrefixIndex
from distsim.signals.settings import SignalSettings
from distsim.signals.view import ClusterView, RouterState


def build_replicas(pools: Sequence[RuntimePoolSpec], loop: EventLoop, first: int) -> list[RuntimeReplica]:
    """``count`` replicas per pool (an autoscaled pool's ``max``), in pool order, numbered from ``first``."""
    replicas: list[RuntimeReplica] = []
    for pool in pools:
        for _ in range(pool.built_count):
            replicas.append(RuntimeReplica(first + len(replicas), pool, loop))
    return replicas


def _route(name: str, replicas: list[RuntimeReplica], policy: PolicySettings, signals: SignalSettings, loop: EventLoop,
           seed: int, extra: dict[str, float]) -> TypeRoute:
    board = SignalBoard(replicas, signals, loop, stream(seed, f"signals/{name}"))
    state = RouterState(len(replicas))
    ones = np.ones(len(replicas), dtype=np.float64)
    facts = {
        "gpus": np.array([r.pool.gpus for r in replicas], dtype=np.int64),
        "price_usd_per_gpu_hour": np.array([r.pool.hardware.price_usd_per_gpu_hour for r in replicas], dtype=np.float64),
        "total_kv_blocks": board.kv_total,
        "max_num_batched_tokens": np.array([r.pool.max_batch_size for r in replicas], dtype=np.int64),
        "max_num_seqs": np.array([r.pool.max_batch_size for r in replicas], dtype=np.int64),
        "sm_fraction": ones, "gpu_fraction": ones,
    }
    routing = policy.routing
    index = None
    if routing.cls.reads_prefix_index(routing.params):  # non-LLM requests carry no prompt: it stays empty
        index = PrefixIndex(len(replicas), [1] * len(replicas), PREFIX_CHUNK_TOKENS)
    members = np.arange(len(replicas))
    view = ClusterView(board, state, loop, members, prefix_index=index, facts=facts, step_models=[r.curve for r in replicas])
    router = routing.cls(routing.params, PolicyContext(len(replicas), stream(seed, f"router/{name}"), seed, extra))
    if router.reads_signals:
        board.enable_push()
    return TypeRoute(name, replicas, board, state, view, router)


def attach_runtimes(cluster: Cluster, pools: Sequence[RuntimePoolSpec], policy: PolicySettings, signals: SignalSettings,
                    loop: EventLoop, recorder: RecordSink, *, seed: int, ttft_slo_ms: float) -> TypedFront:
    """The front over ``cluster`` and the runtime ``pools``' replicas."""
    replicas = build_replicas(pools, loop, first=len(cluster.instances))
    by_type: dict[str, list[RuntimeReplica]] = {}
    for replica in replicas:
        by_type.setdefault(replica.serves, []).append(replica)
    extra = {"default_ttft_slo_ms": ttft_slo_ms}
    routes = {name: _route(name, members, policy, signals, loop, seed, extra) for name, members in by_type.items()}
    front = TypedFront(cluster, routes, loop, recorder, policy.routing.latency_us)
    if cluster.autoscaler is not None or any(pool.autoscale is not None for pool in pools):
        from distsim.runtime.autoscaling import attach_runtime_autoscaling

        attach_runtime_autoscaling(front, pools, seed)
    return front
