"""The root config schema.

Hydra composes ``conf/config.yaml`` on top of :class:`Config` (registered as ``distsim_schema``), so
every key below exists in the composed config and is type-checked by OmegaConf. Each feature checks its
own section's values into frozen settings in its own package, and :func:`distsim.resolve.resolve`
composes them; a bad value raises :class:`distsim.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore

from distsim.autoscale.schema import AutoscaleConfig
from distsim.config.regret import RegretConfig
from distsim.config.runner import RunnerConfig
from distsim.config.search import SearchConfig
from distsim.instance.storage_kv.schema import StorageKvConfig
from distsim.lora.schema import LoraEngineConfig
from distsim.runtime.schema import RuntimeConfig
from distsim.workload.schema import WorkloadConfig


@dataclass
class SpeculativeConfig:
    """Speculative decoding (vLLM's ``speculative_config``; distsim/instance/speculative): a draft proposes
    num_speculative_tokens per sequence, the target verifies them in one step. Null values take the method's
    default (docs/guide/speculative.md cites each)."""

    method: str = "none"  # none | draft_model | eagle | mtp | ngram
    num_speculative_tokens: int | None = None  # draft length k (null: 5 draft_model, 3 eagle, 1 mtp, 5 ngram)
    acceptance_rate: float | None = None  # per drafted position, the same at each (null: 0.8 eagle, 0.85 mtp)
    acceptance_profile: list[float] | None = None  # or one rate per position, each given the earlier accepted
    draft_model: str | None = None  # method draft_model: a catalog model (priced on the same GPUs)
    head_cost_us: float | None = None  # GPU time of one draft pass, instead of pricing the draft or head


@dataclass
class PipelineConfig:
    """The activation sends between pipeline stages (distsim/instance/pipeline): latency + bytes / bandwidth,
    over the GPU link of cluster.hardware within a node and over the network between nodes. Defaults:
    aiconfigurator's p2p latency and inter-node bandwidth (shared/data/hardware.json)."""

    send_latency_us: float = 10.0  # fixed time of one stage-to-stage send
    network_gbps: float = 50.0  # GB/s per GPU per direction between nodes


@dataclass
class EngineConfig:
    """vLLM engine settings, with vLLM's names."""

    tensor_parallel_size: int = 1  # GPUs per engine (vLLM's --tensor-parallel-size); at most cluster.gpus_per_node
    pipeline_parallel_size: int = 1  # stages per replica, each on its own tensor_parallel_size GPUs (1: none)
    data_parallel_size: int = 1  # engine replicas behind vLLM's own balancer, each with tensor_parallel_size GPUs
    enable_expert_parallel: bool = False  # MoE: experts spread whole over the tp x dp GPUs (vLLM's flag)
    max_model_len: int | None = None  # longest prompt + output served (null: the model's context length)
    max_num_seqs: int = 256  # most sequences in one step, and running at once
    max_num_batched_tokens: int = 2048  # token budget of one step (prefill tokens plus one per decoder)
    block_size: int = 16  # tokens per KV block: 1, 8, 16, 32, 64, 128 or 256
    gpu_memory_utilization: float = 0.9  # share of GPU memory vLLM may use (weights, activations, KV cache)
    total_kv_blocks: int | None = None  # null: derived from model, hardware, TP and memory utilisation
    enable_chunked_prefill: bool = True  # split a long prompt over steps within the token budget
    enable_prefix_caching: bool = True  # reuse cached KV blocks of identical prompt prefixes (chained block hashes)
    scheduler_reserve_full_isl: bool = True  # admit a waiting request only if its whole sequence fits (vLLM >= 0.19)
    async_scheduling: bool = True  # vLLM's --async-scheduling (its default by 0.15): step N+1 is scheduled when step N begins
    activation_reserve_fraction: float = 0.05  # of GPU memory, kept for activations and the CUDA graphs
    scheduler: str = "fcfs"  # waiting-queue order: fcfs | priority | shortest_prompt | predicted_output
    # aging of an ordered queue: per second waited, a request gains this many priority levels (priority) or
    # counts this many fewer prompt tokens (shortest_prompt) or predicted output tokens (predicted_output);
    # 0: none; fcfs needs none
    scheduler_aging_per_s: float = 0.0
    # predicted_output's predictor error: a prediction is the true output length x exp(sigma x z), z standard
    # normal per request (its own stream); 0: an oracle; 1: within a factor e for two requests in three
    output_prediction_sigma: float = 1.0
    cpu_kv_blocks: int = 0  # host-memory KV tier in blocks (vLLM's KV offloading); 0: off
    # windowed prefill batching (distsim/instance/batching.py): new prompts are held until this many wait,
    # or the oldest has waited the window
    prefill_batch_min: int | None = None  # null: the window alone closes a batch
    prefill_batch_window_ms: float | None = None  # null: off (continuous batching)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)  # the sends between stages
    storage_kv: StorageKvConfig = field(default_factory=StorageKvConfig)  # a drive below the CPU tier; off without a capacity
    lora: LoraEngineConfig = field(default_factory=LoraEngineConfig)  # LoRA adapters (max_loras null: off)


@dataclass
class ServingConfig:
    """vLLM's serving layer around the kernels (roofline3; distsim/instance/latency/serving.py): each
    mechanism on or off."""

    cuda_graphs: bool = True  # decode and small mixed batches run at the next captured size (padded rows)
    custom_all_reduce: bool = True  # vLLM's own all-reduce under 8 MiB with P2P, else NCCL
    host_overlap: bool | None = None  # host work hidden behind the GPU step (null: engine.async_scheduling)
    interconnect: str | None = None  # nvlink | pcie (null: nvlink when the GPU link beats the host link)
    p2p: bool = True  # GPU peer-to-peer access (custom all-reduce needs it; NCCL without it goes through host)
    fused_moe: bool = True  # MoE layers run vLLM's fused_moe kernels (false: the step tables' stand-in's per-layer overhead)
    # sampling path (its measured terms): auto (the model's generation defaults, which vLLM applies to requests
    # that set none) | temperature | top_k_top_p | greedy
    sampler: str = "auto"


@dataclass
class LatencyConfig:
    """Step-time model: ``roofline3`` (per operator, the default), ``roofline`` (the per-layer roofline, the earlier default) or
    ``linear`` (fitted coefficients). ``roofline`` (distsim/instance/latency/roofline.py) reads the keys from
    compute_efficiency to step_overhead_us; ``roofline3`` (distsim/instance/latency/roofline3.py, where each term
    is explained) reads those and the keys after them. Null: the kind's fitted default set (docs/fidelity.md)."""

    kind: str = "roofline3"  # roofline3 | roofline | linear
    base_us: float | None = None  # linear
    per_prefill_token_us: float | None = None  # linear
    per_decode_token_us: float | None = None  # linear
    compute_efficiency: float | None = None  # matmul FLOP/s over the tensor peak, large token counts
    gemm_half_tokens: float | None = None  # rows per matmul at which it reaches half that efficiency
    attention_efficiency: float | None = None  # prefill attention FLOP/s over the bf16 tensor peak
    memory_efficiency: float | None = None  # achieved over datasheet memory bandwidth
    layer_overhead_us: float | None = None  # GPU time per layer per step besides matmuls and attention
    sequence_overhead_us: float | None = None  # host time per scheduled sequence per step
    step_overhead_us: float | None = None  # host time per step
    expert_compute_efficiency: float | None = None  # grouped expert GEMMs' FLOP/s over the tensor peak
    expert_half_rows: float | None = None  # rows per expert at which they reach half that efficiency
    activation_bytes_hidden: float | None = None  # bytes moved per token, layer and hidden element
    activation_bytes_intermediate: float | None = None  # ... per element of the MLP / active experts' width
    activation_bytes_routed: float | None = None  # ... per hidden element of each routed token copy (MoE)
    moe_layer_overhead_us: float | None = None  # GPU time per MoE layer per step (router, top-k, sort)
    routing_skew: float | None = None  # Zipf exponent of expert popularity; 0: uniform routing
    all_reduce_latency_us: float | None = None  # fixed time of one custom all-reduce (or EP all-to-all)
    all_reduce_link_efficiency: float | None = None  # the custom all-reduce's share of the link bandwidth
    all_reduce_two_shot_us: float | None = None  # the two-shot custom all-reduce's barrier between its stages
    all_reduce_nccl_fixed_us: float | None = None  # NCCL's ring all-reduce on NVLink: fixed time
    all_reduce_nccl_step_us: float | None = None  # ... time per ring step (2 (tp - 1) steps)
    all_reduce_nccl_bus_efficiency: float | None = None  # ... bus bandwidth over the link per direction
    all_reduce_pcie_fixed_us: float | None = None  # NCCL's all-reduce over PCIe: fixed time
    all_reduce_pcie_efficiency: float | None = None  # ... its bandwidth over the link per direction
    eager_layer_overhead_us: float | None = None  # launch gaps per layer of a step run without a CUDA graph
    sampler_call_us: float | None = None  # sampling's fixed time per step
    sampler_bytes_per_logit: float | None = None  # sampling's bytes per logit of each sampled row
    sampler_extra_rows: float | None = None  # rows' worth of sampling time at any batch (row-per-block kernels)
    paged_kv_read_factor: float | None = None  # vLLM's paged attention's KV read time over the step tables'
    serving: ServingConfig = field(default_factory=ServingConfig)
    profile: str | None = None  # a calibrated latency profile: shipped name or path (distsim.calibrate)


@dataclass
class MigConfig:
    """MIG slices (distsim.cluster.mig): ``profile`` (e.g. 3g.40gb) runs one instance per slice; null: whole GPUs."""

    profile: str | None = None  # 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb (H100, A100-80G); null: whole GPUs


@dataclass
class PoolConfig:
    """One pool of identical instances. ``engine`` and ``latency`` override the cluster's values."""

    name: str = "pool"  # unique; names the pool in outputs and errors
    kind: str = "vllm"  # vllm | runtime: a batching runtime for a vision or speech model (distsim.runtime)
    model: str | None = None  # runtime: its catalog model (resnet-50, vit-b-16, whisper-small, ...); vllm: null
    count: int = 1  # instances (or MIG slices); under autoscaling the initial replica count
    hardware: str | None = None  # null: cluster.hardware
    role: str = "mixed"  # mixed | prefill | decode
    engine: dict[str, Any] = field(default_factory=dict)  # cluster.engine keys to override for this pool
    latency: dict[str, Any] = field(default_factory=dict)  # cluster.latency keys to override for this pool
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)  # kind null: a fixed pool of count
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)  # kind runtime: its batcher and service curve
    mig: MigConfig = field(default_factory=MigConfig)  # profile null: whole GPUs; else count counts slices


@dataclass
class KVTransferConfig:
    """The prefill-to-decode KV link under P/D disaggregation: time = latency + bytes / bandwidth, with
    bytes the prompt's KV per GPU (TP-sharded). Defaults: aiconfigurator's inter-node figures
    (shared/data/hardware.json): 50 GB/s per GPU per direction and 10 us latency."""

    bandwidth_gbps: float = 50.0  # GB/s per GPU per direction
    latency_us: float = 10.0  # fixed time of one transfer
    compression: float = 1.0  # share of the KV bytes sent, in (0, 1] (a compressed KV; 1: as computed)


@dataclass
class FrontendConfig:
    """Costs outside the engine, as a client measures (distsim.cluster.settings.FrontendSettings): per
    request and per prompt token before the engine queues a request, per output token after it emits one.
    The defaults were fitted on the real vLLM runs on H100 with roofline3's GPU terms frozen (docs/fidelity.md,
    docs/data/h100_runfit.json); the per-layer roofline (``cluster.latency.kind=roofline``) was fitted with
    1778 / 5.48 / 15.5 (docs/data/h100_fit.json). All 0: the engine's own times."""

    # fitted on the real vLLM runs on H100 with roofline3's GPU and serving terms frozen (docs/fidelity.md;
    # docs/data/h100_runfit.json)
    request_us: float = 0.0  # per request, before the engine queues it (ingestion)
    per_input_token_us: float = 12.7178  # per prompt token, before the engine queues it (tokenisation)
    per_output_token_us: float = 0.0  # per output token, after the engine emits it (detokenisation, streaming)


@dataclass
class CellRttConfig:
    """Round trips between the front and the cells (distsim.cells.network): Vivaldi-style coordinates, a
    point in ``dims`` dimensions (uniform in [0, spread_ms] per axis) plus a height (uniform in [0, height_ms],
    the access link) per cell and for the front; RTT = distance + both heights. Each message adds a jitter
    drawn uniformly in [0, jitter_ms]. All 0: no network delay."""

    dims: int = 3  # dimensions of the coordinates
    spread_ms: float = 0.0  # each coordinate uniform in [0, spread_ms]
    height_ms: float = 0.0  # each height (the access link) uniform in [0, height_ms]
    jitter_ms: float = 0.0  # per message, uniform in [0, jitter_ms]


@dataclass
class CellSpillConfig:
    """Cross-cell spill-over: a cell whose outstanding requests per instance exceed ``threshold`` passes
    an arriving request on to a cell it knows is not saturated, at most ``max_hops`` times per request."""

    threshold: float | None = None  # null: no spill-over
    max_hops: int = 1  # spill-overs at most per request


@dataclass
class CellsConfig:
    """The fleet split into cells behind a front router (distsim.cells); count 1: no cell layer."""

    count: int = 1  # cells; each holds an equal share of every pool (1: no cell layer)
    front_policy: str = "round_robin"  # distsim/cells/front: round_robin | random | least_loaded | nearest
    summary_interval_ms: float = 0.0  # each cell's summary refresh (0: the front reads live counts)
    summary_jitter_ms: float = 0.0  # each interval drawn uniformly within +-jitter
    summary_delay_ms: float = 0.0  # a summary reaches the front this much later
    rtt: CellRttConfig = field(default_factory=CellRttConfig)
    spill: CellSpillConfig = field(default_factory=CellSpillConfig)


@dataclass
class ClusterConfig:
    model: str = "llama-3.1-8b"  # catalog name (llama-3.1-8b, llama-3.1-70b, mixtral-8x7b, qwen2.5-7b, ...) or a path to an HF config.json
    hardware: str = "H100"  # catalog GPU: H100, H200, A100-80G, L40S, B200, MI300X, RTX4090, RTXPRO6000
    instances: int = 4  # instances of the single pool (when cluster.pools is null)
    engine: EngineConfig = field(default_factory=EngineConfig)
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    pools: list[PoolConfig] | None = None  # null: one pool of cluster.instances; else the pools, each with its own hardware, role and overrides
    gpus_per_node: int | None = None  # GPUs one node joins by NVLink (null: the hardware's, 8); caps TP
    kv_transfer: KVTransferConfig = field(default_factory=lambda: KVTransferConfig())
    frontend: FrontendConfig = field(default_factory=FrontendConfig)
    cells: CellsConfig = field(default_factory=CellsConfig)
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)  # the single pool's (kind null: off)
    mig: MigConfig = field(default_factory=MigConfig)  # the single pool's MIG profile (null: whole GPUs)


@dataclass
class SignalsConfig:
    """How fresh the instance-reported signals are that routers read.

    Router-owned signals (requests in transit, outstanding requests, the prefix index) are always
    current. Instance-reported ones (queue_depth, running, kv_utilization, cache_hit_rate,
    queued_tokens) are scraped every ``refresh_interval_ms`` (0 = routers read live state), each
    interval drawn uniformly within +-``jitter_ms``, and become visible ``transport_delay_ms`` later.
    ``per_signal`` overrides interval and jitter per signal, e.g. {kv_utilization: {interval_ms: 500}}.
    """

    refresh_interval_ms: float = 0.0  # 0: routers read live state; else the scrape interval
    jitter_ms: float = 0.0  # each interval drawn uniformly within +-jitter_ms
    transport_delay_ms: float = 0.0  # a scrape becomes visible this much later
    per_signal: dict[str, Any] = field(default_factory=dict)  # signal name -> {interval_ms, jitter_ms} overriding the two above


def _policy_node(name: str, base: list[tuple[str, type, Any]], registry_name: str) -> type:
    """The schema of ``policy.routing`` or ``policy.admission``: ``base`` keys, then the union of every
    registered policy's parameters (its ``Params`` dataclass), each null (or {}) unless set, so every
    key exists in the composed config and a new policy with parameters needs no edit here."""
    from distsim.policies import registry as policies

    registry = getattr(policies, registry_name)  # it imports its members on first lookup
    union: dict[str, Any] = {}
    for kind in registry.names():
        params_cls = registry.get(kind).Params
        for pname, ptype in typing.get_type_hints(params_cls).items():
            if union.setdefault(pname, ptype) != ptype:
                raise TypeError(f"{registry.family} parameter {pname!r} declared as {union[pname]} and {ptype}")
    extra = []
    for pname, ptype in sorted(union.items()):
        is_dict = typing.get_origin(ptype) is dict or dict in [typing.get_origin(a) for a in typing.get_args(ptype)]
        extra.append((pname, ptype | None, field(default_factory=dict) if is_dict else field(default=None)))
    node = make_dataclass(name, [(n, t, field(default=d)) for n, t, d in base] + extra)
    node.__module__ = __name__  # so pickle (Ray, the sweep's config blobs) finds it as schema.<name>
    return node


# time the decision adds before the request reaches its instance
RoutingConfig = _policy_node("RoutingConfig", [("kind", str, "round_robin"), ("latency_ms", float, 0.0)], "ROUTERS")
AdmissionConfig = _policy_node("AdmissionConfig", [("kind", str, "always"), ("latency_ms", float, 0.0)], "ADMISSIONS")


@dataclass
class HedgeConfig:
    """Hedged requests (distsim.cluster.hedging): a request still without its first token after the delay
    gets a copy on another instance; the first copy to answer wins and the others are cancelled. Off
    unless one of the delays is set."""

    delay_slo_fraction: float | None = None  # of the request's TTFT SLO (its class's, else workload.slo)
    delay_ms: float | None = None  # a fixed delay instead
    max_copies: int = 2  # the request and its hedges; each further copy waits another delay
    target: str = "router"  # router | least_outstanding | random: where a copy goes


@dataclass
class PDDeciderConfig:
    """Which requests a P/D fleet disaggregates (distsim.cluster.pd_decider), as llm-d's pd-profile-handler
    and vLLM's disaggregated prefill decide: the decode instance is routed first, and a request whose prompt
    tokens not already in that instance's prefix cache number at most ``threshold_tokens`` prefills there
    (no KV transfer); a longer one goes to a prefill instance. Off (null): every request disaggregated.
    Only a fleet with prefill and decode pools has anything to decide; elsewhere it is ignored."""

    threshold_tokens: int | None = None  # null: off; else prefill locally at most this many uncached prompt tokens
    subtract_cached: bool = True  # count only the prompt tokens the decode instance's prefix cache lacks


@dataclass
class PolicyConfig:
    name: str = "round_robin"  # the policy's name in outputs (set by the conf/policy file)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    hedge: HedgeConfig = field(default_factory=HedgeConfig)
    pd_decider: PDDeciderConfig = field(default_factory=PDDeciderConfig)  # P/D fleets: which requests disaggregate
    trace_decisions: bool = False  # write decisions.parquet: every candidate's score and the regret


@dataclass
class FitnessConfig:
    """One number per run, higher is better (see distsim.metrics.fitness)."""

    kind: str = "goodput"  # goodput | capacity | weighted
    per: str = "gpu"  # goodput, capacity: per gpu | dollar | none
    weights: dict[str, float] = field(default_factory=dict)  # weighted: metric -> weight ({}: defaults)
    refs: dict[str, float] = field(default_factory=dict)  # weighted: metric -> the value scoring 0.5
    share: float = 0.9  # capacity: the share of requests that must meet both SLOs, in (0, 1]
    tolerance: float = 0.02  # capacity: the bisection stops when hi / lo <= 1 + tolerance (> 0)
    max_steps: int = 10  # capacity: at most this many runs besides the configured load's
    stop_early: bool = True  # capacity: stop a trial once it cannot meet the share (same capacity, less CPU)


@dataclass
class SimConfig:
    """Simulation controls that do not change the modelled system. The measurement window
    (distsim.metrics.settings), in seconds from t=0: only requests arriving in [warmup_s, warmup_s + measure_s)
    count in summary.json. The timeline: timeline.json, a Chrome trace of the schedule
    (distsim/timeline/trace.py), kept to [timeline_start_s, timeline_end_s) seconds of simulated time."""

    horizon_s: float | None = None  # stop here; requests still in flight are 'unfinished'
    warmup_s: float = 0.0  # start of the window
    warmup_requests: int = 0  # or warm up by count: the first N requests by arrival do not count (0: off)
    measure_s: float | None = None  # length of the window; null: to the end of the run
    drain_s: float | None = None  # stop the run this long after the window (sets the horizon); needs measure_s
    fast_forward: bool = True  # skip decode-only stretches in closed form (results are identical)
    write_requests: bool = True  # write requests.parquet
    timeline: bool = False  # write timeline.json
    timeline_start_s: float = 0.0  # keep what overlaps [timeline_start_s, timeline_end_s)
    timeline_end_s: float | None = None  # null: to the end of the run
    # a progress line on stderr during a long single run (python -m distsim); null: when stderr is a terminal
    progress: bool | None = None


@dataclass
class Config:
    seed: int = 0  # the master seed: every random stream derives from it and a subsystem name
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    fitness: FitnessConfig = field(default_factory=FitnessConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    search: SearchConfig = field(default_factory=SearchConfig)  # used by python -m distsim.search only
    regret: RegretConfig = field(default_factory=RegretConfig)  # fork-and-replay regret of a single run (off: 0 samples)


_registered = False


def register_schemas() -> None:
    """Register the schema with Hydra's ConfigStore (idempotent)."""
    global _registered
    if not _registered:
        ConfigStore.instance().store(name="distsim_schema", node=Config)
        _registered = True
