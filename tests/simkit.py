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


def policy(routing: str = "round_robin", admission: str = "always"):
    return SimpleNamespace(routing=SimpleNamespace(kind=routing, scorers=None), admission=SimpleNamespace(kind=admission))


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
) -> MiniSim:
    params = params or engine()
    latency = latency or LinearLatency(100.0, 2.0, 5.0)
    pool = PoolSpec("p", instances, "mixed", FAKE_HW, None, 1, params, latency, "cluster")
    loop = EventLoop(horizon_us)
    recorder = Recorder(1e9, 1e9)
    cluster = Cluster([pool], policy(routing), loop, recorder, seed, fast_forward=fast_forward)
    sim = MiniSim(loop, cluster, recorder)
    if check_every_event:
        _wrap_checks(sim)
    cluster.feed(requests)
    loop.run()
    cluster.finish(horizon_us)
    return sim


def _wrap_checks(sim: MiniSim) -> None:
    """Check every instance's invariants after each instance event."""
    for inst in sim.cluster.instances:
        original = inst._on_event

        def checked(now, version, _inst=inst, _orig=original):
            _orig(now, version)
            _inst.check_invariants()
            sim.checks += 1

        inst._on_event = checked
