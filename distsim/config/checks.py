"""The one place a composed config is checked: small validators, and a checker per config section.

Every check raises :class:`distsim.errors.ConfigError` naming the dotted key, or warns with
:func:`distsim.errors.warn_config` about a legal but suspicious combination. The section checkers turn
a config node into the typed settings of :mod:`distsim.config.settings`; :func:`distsim.config.scenario.resolve`
calls them all before anything is built, so a bad value anywhere stops a run (or a sweep, before its
first job) at once.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from distsim.config.settings import (
    HEDGE_TARGETS,
    SIGNALS,
    CellSettings,
    FitnessSettings,
    FrontendSettings,
    HedgeSettings,
    PolicyChoice,
    PolicySettings,
    SignalSettings,
    SimSettings,
    SloDefaults,
    TransferSettings,
)
from distsim.config.timeline import timeline_window

# the validators live in distsim.config.validators; checks.number etc. keep working for callers
from distsim.config.validators import (  # noqa: F401
    choice,
    fraction,
    integer,
    is_set,
    ms_to_us,
    non_negative,
    number,
    number_list,
    positive,
    required,
    warn_unread,
)
from distsim.config.window import measure_window
from distsim.errors import ConfigError, warn_config

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)  # vLLM's --block-size choices

# ---- sections ------------------------------------------------------------------------------------


def sim(cfg: Any) -> SimSettings:
    """``seed`` and ``sim.*``."""
    seed = cfg.seed
    if seed is None or isinstance(seed, bool) or seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0 (got {seed!r})")
    h = cfg.sim.horizon_s
    if h is not None and not (h > 0 and math.isfinite(h)):
        raise ConfigError("sim.horizon_s", f"must be a finite number > 0, or null for no horizon (got {h!r})")
    horizon = None if h is None else int(round(h * 1e6))
    window, horizon = measure_window(cfg.sim, horizon)  # a drain sets the horizon
    timeline = timeline_window(cfg.sim, horizon)
    return SimSettings(int(seed), horizon, bool(cfg.sim.fast_forward), bool(cfg.sim.write_requests), window, timeline)


def slo_defaults(workload: Any) -> SloDefaults:
    slo = workload.slo
    return SloDefaults(float(slo.ttft_ms), float(slo.tpot_ms))


def signals(cfg: Any) -> SignalSettings:
    """``signals.*``: per signal (interval_us, jitter_us), and the transport delay."""
    interval = ms_to_us("signals.refresh_interval_ms", cfg.refresh_interval_ms)
    jitter = ms_to_us("signals.jitter_ms", cfg.jitter_ms)
    if jitter and jitter >= interval:
        raise ConfigError("signals.jitter_ms", f"must be smaller than refresh_interval_ms (got {cfg.jitter_ms})")
    cadence = {name: (interval, jitter) for name in SIGNALS}
    for name, spec in (cfg.per_signal or {}).items():
        key = f"signals.per_signal.{name}"
        if name not in cadence:
            raise ConfigError(key, f"unknown signal; known: {', '.join(SIGNALS)}")
        spec = spec or {}
        unknown = set(spec) - {"interval_ms", "jitter_ms"}
        if unknown:
            raise ConfigError(f"{key}.{sorted(unknown)[0]}", "unknown key; known: interval_ms, jitter_ms")
        iv = ms_to_us(f"{key}.interval_ms", spec.get("interval_ms", cfg.refresh_interval_ms))
        jt = ms_to_us(f"{key}.jitter_ms", spec.get("jitter_ms", 0))
        if jt and jt >= iv:
            raise ConfigError(f"{key}.jitter_ms", "must be smaller than interval_ms")
        cadence[name] = (iv, jt)
    return SignalSettings(cadence, ms_to_us("signals.transport_delay_ms", cfg.transport_delay_ms))


def transfer(cfg: Any) -> TransferSettings:
    """``cluster.kv_transfer.*`` (used under P/D disaggregation)."""
    bw = positive("cluster.kv_transfer.bandwidth_gbps", cfg.bandwidth_gbps)
    return TransferSettings(bw * 1e9, non_negative("cluster.kv_transfer.latency_us", cfg.latency_us))


def frontend(cfg: Any) -> FrontendSettings:
    """``cluster.frontend.*``: costs outside the engine, each >= 0."""
    return FrontendSettings(
        non_negative("cluster.frontend.request_us", cfg.request_us),
        non_negative("cluster.frontend.per_input_token_us", cfg.per_input_token_us),
        non_negative("cluster.frontend.per_output_token_us", cfg.per_output_token_us),
    )


def _policy_choice(node: Any, key: str, registry: Any) -> PolicyChoice:
    cls = registry.get(node.kind)
    params = cls.Params.from_node(node)
    params.check(key)
    own = {"kind", "latency_ms", *cls.Params.__dataclass_fields__}
    warn_unread(node, key, own, f"the {registry.family} {node.kind!r} does not use it")
    return PolicyChoice(node.kind, cls, params, ms_to_us(f"{key}.latency_ms", node.latency_ms))


def policy(cfg: Any) -> PolicySettings:
    """``policy.*``: the routing and admission classes with their checked parameters."""
    from distsim.policies.base import ADMISSIONS, ROUTERS

    routing = _policy_choice(cfg.routing, "policy.routing", ROUTERS)
    admission = _policy_choice(cfg.admission, "policy.admission", ADMISSIONS)
    return PolicySettings(routing, admission, bool(cfg.trace_decisions), hedge(cfg.hedge))


def hedge(cfg: Any) -> HedgeSettings:
    """``policy.hedge.*``: one delay (a fraction of the TTFT SLO, or milliseconds), the copies, the target."""
    key = "policy.hedge"
    if cfg.delay_slo_fraction is not None and cfg.delay_ms is not None:
        raise ConfigError(f"{key}.delay_ms", "give delay_slo_fraction or delay_ms, not both")
    slo_fraction = None if cfg.delay_slo_fraction is None else positive(f"{key}.delay_slo_fraction", cfg.delay_slo_fraction)
    delay = None if cfg.delay_ms is None else ms_to_us(f"{key}.delay_ms", cfg.delay_ms)
    copies = integer(f"{key}.max_copies", cfg.max_copies, low=2)
    return HedgeSettings(slo_fraction, delay, copies, choice(f"{key}.target", cfg.target, HEDGE_TARGETS))


def hedging_fits(policy: PolicySettings, pools: Any, slo: SloDefaults) -> None:
    """Hedging copies a request onto another instance of a mixed cluster: P/D is refused (a copy would
    need a pair of instances and a transfer to cancel), and one engine leaves nowhere to copy to. A delay
    in SLO fractions needs a finite TTFT SLO."""
    if not policy.hedge.enabled:
        return
    if policy.hedge.slo_fraction is not None and not math.isfinite(slo.ttft_ms):
        raise ConfigError(
            "policy.hedge.delay_slo_fraction",
            "needs a TTFT SLO: set workload.slo.ttft_ms (or give policy.hedge.delay_ms instead)",
        )
    if any(p.role != "mixed" for p in pools):
        raise ConfigError("policy.hedge", "hedging needs mixed pools; P/D disaggregation (prefill and decode pools) is not supported")
    if sum(p.count * p.data_parallel_size for p in pools) < 2:
        raise ConfigError("policy.hedge", "hedging needs at least two instances to copy a request to")


def prefix_routing_needs_caching(policy: PolicySettings, pools: Any) -> None:
    """Warn when a router scores prefix-cache hits but no instance caches prefixes."""
    routing = policy.routing
    if routing.cls.reads_prefix_index(routing.params) and not any(p.engine.enable_prefix_caching for p in pools):
        warn_config(
            "policy.routing.kind",
            f"{routing.kind} routes on prefix-cache hits, but cluster.engine.enable_prefix_caching is false: "
            "no instance caches a prefix, so its prefix scores only concentrate load",
        )


def cells(cfg: Any, pools: Any) -> CellSettings:
    """``cluster.cells.*``: every pool's instances split equally among the cells, the front router, the
    summaries' cadence and delay, the network's scales and the spill-over rule."""
    from distsim.cells.registry import FRONTS

    key = "cluster.cells"
    count = integer(f"{key}.count", cfg.count, low=1)
    for pool in pools:
        if pool.count % count:
            where = "cluster.instances" if pool.key == "cluster" else f"{pool.key}.count"
            raise ConfigError(
                f"{key}.count",
                f"{count} cells do not divide pool {pool.name!r} ({where}={pool.count}): every cell holds an "
                "equal share of every pool",
            )
    interval = ms_to_us(f"{key}.summary_interval_ms", cfg.summary_interval_ms)
    jitter = ms_to_us(f"{key}.summary_jitter_ms", cfg.summary_jitter_ms)
    delay = ms_to_us(f"{key}.summary_delay_ms", cfg.summary_delay_ms)
    if jitter and jitter >= interval:
        raise ConfigError(f"{key}.summary_jitter_ms", f"must be smaller than summary_interval_ms (got {cfg.summary_jitter_ms})")
    if delay and not interval:
        raise ConfigError(f"{key}.summary_delay_ms", "needs summary_interval_ms > 0 (0: the front reads live counts)")
    threshold = cfg.spill.threshold
    if threshold is not None:
        threshold = positive(f"{key}.spill.threshold", threshold)
    settings = CellSettings(
        count=count,
        front_policy=str(cfg.front_policy),
        front=FRONTS.get(cfg.front_policy),
        summary_interval_us=interval,
        summary_jitter_us=jitter,
        summary_delay_us=delay,
        dims=integer(f"{key}.rtt.dims", cfg.rtt.dims, low=1),
        spread_ms=non_negative(f"{key}.rtt.spread_ms", cfg.rtt.spread_ms),
        height_ms=non_negative(f"{key}.rtt.height_ms", cfg.rtt.height_ms),
        jitter_us=ms_to_us(f"{key}.rtt.jitter_ms", cfg.rtt.jitter_ms),
        spill_threshold=threshold,
        max_hops=integer(f"{key}.spill.max_hops", cfg.spill.max_hops, low=1),
    )
    if count == 1 and dataclasses.replace(settings, front=None) != CellSettings():
        warn_config(f"{key}.count", "is 1: no cell layer, so the other cluster.cells settings have no effect")
    return settings


def fitness(cfg: Any) -> FitnessSettings:
    """``fitness.*``, checked against the fitness form's own rules (distsim.metrics.fitness)."""
    from distsim.metrics.fitness import FITNESS, check_fitness

    FITNESS.get(cfg.kind)
    own = {"goodput": ("kind", "per"), "weighted": ("kind", "weights", "refs")}
    if cfg.kind in own:
        warn_unread(cfg, "fitness", own[cfg.kind], f"the fitness {cfg.kind!r} does not use it", {"per": "gpu"})
    settings = FitnessSettings(str(cfg.kind), str(cfg.per), dict(cfg.weights or {}), dict(cfg.refs or {}))
    check_fitness(settings)
    return settings


# ---- engine (cluster.engine and each pool's overrides) ---------------------------------------------

def engine(engine: Any, key: str) -> None:
    """``cluster.engine`` (or a pool's merged engine) against vLLM's own limits."""
    from distsim.instance.queues import QUEUES

    def need(cond: bool, sub: str, rule: str, value: Any) -> None:
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
    need(engine.scheduler in QUEUES, "scheduler", f"must be one of {', '.join(sorted(QUEUES))}", engine.scheduler)
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


def prefill_batching(engine: Any, need: Any) -> None:
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


def tp_within_node(tp: int, hardware: Any, gpus_per_node: int | None, engine_key: str, dp: int = 1) -> None:
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


def max_model_len(engine: Any, model: Any, engine_key: str) -> int | None:
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


def one_sequence_fits(params: Any, engine_key: str, engine: Any, model: Any, hardware: Any, gpus_per_node: int | None) -> None:
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


def expert_parallel(enabled: bool, model: Any, engine_key: str, tp: int = 1, dp: int = 1) -> None:
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
