"""``cluster.engine.pipeline_parallel_size`` and ``cluster.engine.pipeline`` checked into
:class:`PipelineSettings` (a bad value: one line naming the key), and the pipelined step model built from them.

Placement: stage ``k`` runs on GPUs ``k*TP .. (k+1)*TP - 1`` of the replica, packed onto nodes of
``cluster.gpus_per_node`` (or the GPU's own node size) in order, so a boundary whose two stages sit in one
node sends over the node's GPU link and one between nodes over the network. Tensor parallelism stays within
a node (distsim.cluster.checks); the stages may span nodes, which is what pipeline parallelism is for.
The link figures' defaults are aiconfigurator's (shared/data/hardware.json, ``aiconfigurator_empirical_factors``:
``p2p_latency_s`` 10 us, inter-node 50 GB/s per GPU per direction for H100/H200).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.instance.pipeline.latency import ACTIVATION_TENSORS, PipelineLatency, StageLinks
from distsim.instance.pipeline.partition import stage_layers, stage_weight_bytes

if TYPE_CHECKING:
    from distsim.catalog import HardwareSpec, ModelSpec
    from distsim.instance.instance import EngineParams
    from distsim.instance.latency.base import LatencyContext, LatencyModel


@dataclass(frozen=True)
class PipelineSettings:
    """A pipelined replica's stages (decoder layers each) and its boundaries' sends."""

    size: int  # stages (vLLM's pipeline_parallel_size)
    layers: tuple[int, ...]
    links: StageLinks
    crosses_node: tuple[bool, ...]  # each boundary: between nodes (the network) or within one


def _positive(value: Any, key: str, low_open: bool) -> float:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value < 0 or (low_open and value == 0):
        raise ConfigError(key, f"must be a number {'>' if low_open else '>='} 0 (got {value!r})")
    return float(value)


def resolve_pipeline(engine: Any, key: str, model: ModelSpec, hardware: HardwareSpec, tp: int,
                     gpus_per_node: int | None) -> PipelineSettings | None:
    """The settings of an engine node (None with one stage: the replica is built as without the feature)."""
    pp = engine.pipeline_parallel_size
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise ConfigError(f"{key}.pipeline_parallel_size", f"must be an integer >= 1 (got {pp!r})")
    if pp == 1:
        return None
    if pp > model.num_layers:
        raise ConfigError(f"{key}.pipeline_parallel_size",
                          f"{model.name} has {model.num_layers} layers: at most that many stages (got {pp})")
    node = engine.pipeline
    latency = _positive(node.send_latency_us, f"{key}.pipeline.send_latency_us", low_open=False)
    network = _positive(node.network_gbps, f"{key}.pipeline.network_gbps", low_open=True) * 1e9
    per_node = gpus_per_node or hardware.gpus_per_node
    crosses = tuple(((k + 1) * tp - 1) // per_node != ((k + 1) * tp) // per_node for k in range(pp - 1))
    token_bytes = ACTIVATION_TENSORS * model.hidden_size * model.dtype_bytes / tp  # each TP rank's slice
    per_token = tuple(token_bytes / (network if c else hardware.link_bytes_per_s) * 1e6 for c in crosses)
    return PipelineSettings(pp, stage_layers(model.num_layers, pp), StageLinks((latency,) * (pp - 1), per_token), crosses)


def refuse_unmodelled(key: str, role: str, speculative: bool, mig: bool, dp: int) -> None:
    """What pipeline parallelism is not modelled with: one line naming the key."""
    what = ("P/D disaggregation (a prefill or decode pool)" if role != "mixed" else
            "speculative decoding" if speculative else "MIG slices" if mig else
            "data_parallel_size > 1" if dp > 1 else None)
    if what is not None:
        raise ConfigError(f"{key}.pipeline_parallel_size", f"pipeline parallelism is not modelled with {what}")


def pipelined(settings: PipelineSettings, params: EngineParams, whole: LatencyModel, latency_cfg: Any,
              ctx: LatencyContext, model_name: str) -> tuple[EngineParams, PipelineLatency, float]:
    """A pipelined replica's engine settings (a round's token budget: one ``max_num_batched_tokens`` per
    micro-batch, as vLLM schedules each), its step model (:func:`pipeline_latency`) and the weight bytes on
    each GPU of its largest stage (what a cold start loads)."""
    params = replace(params, max_num_batched_tokens=params.max_num_batched_tokens * settings.size)
    weights = max(stage_weight_bytes(ctx.model, ctx.tensor_parallel_size, settings.layers))
    return params, pipeline_latency(settings, whole, latency_cfg, ctx, model_name), weights


def pipeline_latency(settings: PipelineSettings, whole: LatencyModel, latency_cfg: Any, ctx: LatencyContext,
                     model_name: str) -> PipelineLatency:
    """The pipelined step model over ``whole`` (the configured model of the whole replica); its one-layer twin
    prices the per-layer share (none for the linear model, which has no architecture)."""
    from distsim.catalog.models import load_head_model
    from distsim.instance.latency.build import build_latency_model

    one_layer = None
    if latency_cfg.kind != "linear":
        one_layer = build_latency_model(latency_cfg, replace(ctx, model=load_head_model(model_name)))
    return PipelineLatency(whole, one_layer, settings.layers, settings.links)
