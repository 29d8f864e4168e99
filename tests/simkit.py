"""Test helpers: run the cluster on hand-made requests without the catalogs or Hydra."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from distsim.cluster.cluster import Cluster
from distsim.cluster.pools import PoolSpec
from distsim.engine.loop import EventLoop
from distsim.instance.instance import EngineParams
from distsim.instance.latency.linear import LinearLatency
from distsim.metrics.recorder import Recorder
from distsim.request import Request


@dataclass
class MiniSim:
    loop: EventLoop
    cluster: Cluster
    recorder: Recorder
    checks: int = 0
    violations: list = field(default_factory=list)


FAKE_HW = SimpleNamespace(name="fake", price_usd_per_gpu_hour=1.0)


def engine(**kw) -> EngineParams:
    base = dict(max_num_seqs=8, max_num_batched_tokens=64, block_size=4, total_kv_blocks=64)
    base.update(kw)
    return EngineParams(**base)


def policy(routing: str = "round_robin", admission: str = "always", trace: bool = False, **kw):
    """A policy config; keyword arguments go to routing (``r_...``) or admission (``a_...``)."""
    r = {"kind": routing, "scorers": None, "latency_ms": 0.0}
    a = {"kind": admission, "latency_ms": 0.0}
    for key, value in kw.items():
        (r if key.startswith("r_") else a)[key[2:]] = value
    return SimpleNamespace(routing=SimpleNamespace(**r), admission=SimpleNamespace(**a), trace_decisions=trace)


def signals(interval_ms: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0, per_signal=None):
    return SimpleNamespace(refresh_interval_ms=interval_ms, jitter_ms=jitter_ms, transport_delay_ms=delay_ms, per_signal=per_signal)


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
) -> MiniSim:
    params = params or engine()
    latency = latency or LinearLatency(100.0, 2.0, 5.0)
    pools = pools or [PoolSpec("p", instances, "mixed", FAKE_HW, None, 1, params, latency, "cluster")]
    loop = EventLoop(horizon_us)
    recorder = Recorder(ttft_slo_ms, 1e9)
    cluster = Cluster(
        pools,
        policy_cfg or policy(routing),
        loop,
        recorder,
        seed,
        fast_forward=fast_forward,
        signals_cfg=signals_cfg,
        transfer_cfg=transfer_cfg,
        default_ttft_slo_ms=ttft_slo_ms,
    )
    sim = MiniSim(loop, cluster, recorder)
    if check_every_event:
        _wrap_checks(sim)
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
