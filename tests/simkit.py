"""Test helpers: run the cluster on hand-made requests without the catalogs or Hydra."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from omegaconf import OmegaConf

from distsim.catalog.hardware import HardwareSpec
from distsim.catalog.models import ModelSpec
from distsim.cells import settings as cells_settings
from distsim.cluster import settings as cluster_settings
from distsim.cluster.cluster import Cluster
from distsim.cluster.pools import PoolSpec
from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
from distsim.config.schema import CellsConfig, PolicyConfig, SignalsConfig
from distsim.events.loop import EventLoop
from distsim.instance.decode_set import ceil_div
from distsim.instance.instance import EngineParams
from distsim.instance.latency.linear import LinearLatency
from distsim.metrics.recorder import Recorder
from distsim.request import Request
from distsim.signals import settings as signal_settings
from distsim.signals.settings import SignalSettings
from distsim.workload.settings import SloDefaults
from distsim.world import build_world


@dataclass
class MiniSim:
    loop: EventLoop
    cluster: Cluster
    recorder: Recorder
    checks: int = 0
    violations: list = field(default_factory=list)


FAKE_HW = HardwareSpec(
    name="fake", bf16_tflops=1.0, hbm_bw_tbps=1.0, memory_bytes=1 << 30, link_gbps_per_dir=1.0,
    price_usd_per_gpu_hour=1.0,
)


def tiny_model(kv_bytes_per_token: int) -> ModelSpec:
    """A one-layer model whose KV is ``kv_bytes_per_token`` bytes per token (one KV head, bf16)."""
    return ModelSpec(
        name="tiny", num_layers=1, hidden_size=64, num_attention_heads=1, num_kv_heads=1,
        head_dim=kv_bytes_per_token // 4, intermediate_size=64, vocab_size=64, dtype_bytes=2,
    )


def shared_prefix_requests(
    seed: int, n: int, gap_us: float, prompt: tuple[int, int], shared_blocks: int, output: tuple[int, int]
) -> list[Request]:
    """Poisson arrivals (mean gap ``gap_us``) of prompts of ``prompt`` tokens (block size 4) opening with up to
    ``shared_blocks`` blocks of one of three shared prefixes, then private blocks; ``output`` tokens each
    (integers in [lo, hi)): long enough outputs make decode runs."""
    rng = np.random.default_rng(seed)
    reqs = []
    for i, t in enumerate(np.cumsum(rng.exponential(gap_us, n)).astype(np.int64)):
        tokens = int(rng.integers(*prompt))
        blocks = ceil_div(tokens, 4)
        shared = int(rng.integers(0, 3)) * 1000
        hashes = tuple(shared + b for b in range(min(blocks, shared_blocks)))
        hashes += tuple(10**6 + i * 100 + b for b in range(blocks - shared_blocks))
        reqs.append(Request(i, int(t), tokens, int(rng.integers(*output)), block_hashes=hashes))
    return reqs


def engine(**kw) -> EngineParams:
    """A small engine for unit tests: every setting explicit (EngineParams has no defaults), synchronous
    scheduling unless a test asks for vLLM's async scheduling (the config's default)."""
    base = dict(
        max_num_seqs=8, max_num_batched_tokens=64, block_size=4, total_kv_blocks=64, enable_chunked_prefill=True,
        enable_prefix_caching=True, scheduler_reserve_full_isl=True, async_scheduling=False, scheduler="fcfs",
        max_model_len=None, cpu_kv_blocks=0, prefill_batch_min=None, prefill_batch_window_us=0,
        output_prediction_sigma=1.0,
    )
    base.update(kw)
    return EngineParams(**base)


def policy(routing: str = "round_robin", admission: str = "always", trace: bool = False, **kw) -> PolicySettings:
    """Checked policy settings; keyword arguments go to routing (``r_...``) or admission (``a_...``)."""
    node = OmegaConf.structured(PolicyConfig)
    node.routing.kind, node.admission.kind, node.trace_decisions = routing, admission, trace
    for key, value in kw.items():
        (node.routing if key.startswith("r_") else node.admission)[key[2:]] = value
    return cluster_settings.policy(node)


def signals(interval_ms: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0, per_signal=None) -> SignalSettings:
    node = OmegaConf.structured(SignalsConfig)
    node.refresh_interval_ms, node.transport_delay_ms, node.jitter_ms = interval_ms, delay_ms, jitter_ms
    node.per_signal = per_signal or {}
    return signal_settings.signals(node)


def cell_settings(pools: list, **keys):
    """Checked cell settings for ``pools``: ``keys`` are cluster.cells keys, dotted ones with "__"
    (``count=4, spill__threshold=2, rtt__spread_ms=10``)."""
    node = OmegaConf.structured(CellsConfig)
    for key, value in keys.items():
        OmegaConf.update(node, key.replace("__", "."), value)
    return cells_settings.cells(node, pools)


def transfer(bandwidth_gbps: float, latency_us: float) -> TransferSettings:
    return TransferSettings(bandwidth_gbps * 1e9, latency_us)


def run(
    requests: list[Request],
    params: EngineParams | None = None,
    latency=None,
    *,
    instances: int = 1,
    fast_forward: bool = True,
    routing: str = "round_robin",
    check_every_event: bool = False,
    seed: int = 0,
    horizon_us: int | None = None,
    policy_cfg=None,
    signals_cfg=None,
    pools: list | None = None,
    transfer_cfg=None,
    ttft_slo_ms: float = 1e9,
    frontend: FrontendSettings | None = None,
    after_event=None,
    cells: dict | None = None,
    on_built=None,
) -> MiniSim:
    params = params or engine()
    latency = latency or LinearLatency(100.0, 2.0, 5.0)
    pools = pools or [PoolSpec("p", instances, "mixed", FAKE_HW, tiny_model(1000), 1, params, latency, "cluster")]
    loop = EventLoop(horizon_us)
    recorder = Recorder(ttft_slo_ms, 1e9, frontend.output_lag_us if frontend else 0)
    cluster = build_world(
        pools, policy_cfg or policy(routing), signals_cfg or SignalSettings(), transfer_cfg or TransferSettings(),
        loop, recorder, seed=seed, fast_forward=fast_forward, slo=SloDefaults(ttft_slo_ms, 1e9), frontend=frontend,
        cells=cell_settings(pools, **cells) if cells else None,
    )
    sim = MiniSim(loop, cluster, recorder)
    if check_every_event:
        _wrap_checks(sim)
    if after_event is not None:  # a probe called with (sim, now) after each event
        loop.after_event = lambda now: after_event(sim, now)
    if on_built is not None:  # called with the sim before the first event (to subscribe listeners)
        on_built(sim)
    cluster.feed(requests)
    loop.run()
    cluster.finish(horizon_us)
    return sim


def _wrap_checks(sim: MiniSim) -> None:
    """Check the cluster's and every instance's invariants after each event."""

    def check(now: int) -> None:
        sim.cluster.check_invariants()
        sim.checks += 1

    sim.loop.after_event = check
