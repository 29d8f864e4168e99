"""The one world builder: the engines and their cluster (or the cells' fleet, when that feature builds it),
with every feature the config names attached (distsim.feature).

:data:`FEATURES` is the registry: each feature's name, where its class lives and when the config names it,
in the order the features attach and report (summary.json's sections follow it). A feature's module is
imported only when the run names it, so a run pays nothing for the features it leaves off. A new
cluster-level feature is its own package (its settings, its feature class, its report) plus a line here.
A scenario (distsim.resolve.Scenario, the layer above) is only read here, so it is typed ``Any``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distsim.cluster.build import build_cluster
from distsim.events.loop import EventLoop
from distsim.feature import Feature, Parts
from distsim.instance.batching import batching_on
from distsim.instance.instance import Instance
from distsim.metrics.recorder import Recorder
from distsim.policies.base import reports_metrics

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.cells.settings import CellSettings
    from distsim.cluster.pools import PoolSpec
    from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
    from distsim.protocols import World
    from distsim.signals.settings import SignalSettings
    from distsim.workload.settings import SloDefaults


@dataclass(frozen=True)
class Entry:
    """A registered feature: its name, its class as "module:Class", and whether ``parts`` name it. A feature
    whose settings live only in its own package names their resolver as "module:function" (``settings``:
    called with the composed config, it returns the frozen settings, or None when the config leaves the
    feature off); it is then on when its settings are (``wanted`` may be left out)."""

    name: str
    where: str
    wanted: Callable[[Parts], bool] | None = None
    settings: str = ""

    def load(self) -> type[Feature]:
        return _named(self.where)

    def on(self, parts: Parts) -> bool:
        return self.name in parts.settings if self.wanted is None else self.wanted(parts)


def _named(where: str) -> Any:
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


def _reports_on(parts: Parts, name: str) -> bool:
    """Whether the run's request source names feature ``name`` as the one that reports on it."""
    return getattr(parts.workload, "feature", "") == name  # a caller's list of requests names none


def _autoscaled(parts: Parts) -> bool:
    return any(p.autoscale is not None for p in (*parts.pools, *parts.runtimes))


def _lora(parts: Parts) -> bool:
    return "lora" in parts.settings or any(pool.engine.lora is not None for pool in parts.pools)


def _policy_metrics(parts: Parts) -> bool:
    """Whether a configured routing or admission class keeps figures of its own (``metrics()``)."""
    return reports_metrics(parts.policy.routing.cls) or reports_metrics(parts.policy.admission.cls)


FEATURES: tuple[Entry, ...] = (
    Entry("autoscale", "distsim.autoscale.feature:AutoscaleFeature", _autoscaled),
    Entry("timeline", "distsim.timeline.feature:TimelineFeature", lambda p: p.sim is not None and p.sim.timeline is not None),
    Entry("window", "distsim.metrics.window:WindowFeature", lambda p: p.sim is not None and p.sim.window is not None),
    Entry("kv_transfer", "distsim.pd.feature:TransferFeature", lambda p: any(pool.role != "mixed" for pool in p.pools)),
    Entry("prefill_batching", "distsim.instance.batching_feature:PrefillBatchingFeature",
          lambda p: any(batching_on(pool.engine.prefill_batch_min, pool.engine.prefill_batch_window_us) for pool in p.pools)),
    Entry("mig", "distsim.mig.feature:MigFeature", lambda p: any(pool.mig is not None for pool in (*p.pools, *p.runtimes))),
    Entry("signals", "distsim.signals.feature:SignalsFeature", lambda p: True),
    Entry("types", "distsim.runtime.feature:TypesFeature", lambda p: p.typed or bool(p.runtimes)),
    Entry("hedging", "distsim.hedging.feature:HedgingFeature", lambda p: p.policy.hedge.enabled),
    Entry("clients", "distsim.closedloop.clients:ClientsFeature", lambda p: _reports_on(p, "clients")),
    Entry("sessions", "distsim.closedloop.sessions:SessionsFeature", lambda p: _reports_on(p, "sessions")),
    Entry("cells", "distsim.cells.feature:CellsFeature", lambda p: p.cells is not None and p.cells.enabled),
    Entry("lora", "distsim.lora.feature:LoraFeature", _lora, settings="distsim.lora.catalog:catalog_of"),
    Entry("sheddable", "distsim.metrics.shedding:SheddingFeature", lambda p: bool(getattr(p.slo, "sheddable", ()))),
    Entry("policy", "distsim.policies.metrics_feature:PolicyMetricsFeature", _policy_metrics),
    Entry("storage_kv", "distsim.instance.storage_kv.feature:StorageKvFeature",
          lambda p: any(pool.engine.storage_kv is not None for pool in p.pools)),
)


def named(parts: Parts, only: Iterable[str] | None = None) -> list[Entry]:
    """The registered features ``parts`` name (of ``only``, if given), in registry order."""
    keep = None if only is None else set(only)
    return [e for e in FEATURES if (keep is None or e.name in keep) and e.on(parts)]


def settings_of(cfg: DictConfig) -> dict[str, Any]:
    """The settings of the registered features that resolve their own (``Entry.settings``), by name, for
    those the config turns on."""
    found = {}
    for entry in FEATURES:
        if entry.settings:
            settings = _named(entry.settings)(cfg)
            if settings is not None:
                found[entry.name] = settings
    return found


def parts_of(scenario: Any, loop: EventLoop) -> Parts:
    """The parts of a run's world, from its resolved scenario."""
    sim = scenario.sim
    return Parts(
        scenario.pools, scenario.policy, scenario.signals, scenario.transfer, scenario.slo, scenario.frontend, loop,
        None, seed=sim.seed, fast_forward=sim.fast_forward, cells=scenario.cells, runtimes=scenario.runtimes,
        typed=scenario.typed, sim=sim, settings=scenario.features, workload=scenario.workload,
    )


def check(scenario: Any) -> None:
    """Each named feature's own checks of the scenario (``check(scenario)`` on its class, where it has one):
    the combinations it cannot compose with are refused there, naming the key."""
    parts = parts_of(scenario, EventLoop(None))
    for entry in named(parts):
        own = getattr(entry.load(), "check", None)
        if own is not None:
            own(scenario)


def build(scenario: Any, loop: EventLoop, *, only: Iterable[str] | None = None) -> Parts:
    """The world ``scenario`` describes, on ``loop``, with its features (of ``only``, if given) attached."""
    return assemble(parts_of(scenario, loop), only)


def assemble(parts: Parts, only: Iterable[str] | None = None) -> Parts:
    """Attach the features ``parts`` name: each prepares, one may build the world (else: one cluster of
    the pools), then each attaches in registry order."""
    features = parts.features
    for entry in named(parts, only):
        features[entry.name] = entry.load()()
    for feature in features.values():
        feature.prepare(parts)
    if parts.recorder is None:
        recorder_cls = parts.recorder_cls or Recorder
        parts.recorder = recorder_cls(parts.slo.ttft_ms, parts.slo.tpot_ms, parts.frontend.output_lag_us)
    if not any(feature.build(parts) for feature in features.values()):
        cluster = build_cluster(
            parts.pools, parts.policy, parts.signals, parts.transfer, parts.loop, parts.recorder, seed=parts.seed,
            fast_forward=parts.fast_forward, slo=parts.slo, frontend=parts.frontend,
            instance_cls=parts.instance_cls or Instance,
        )
        parts.world, parts.clusters = cluster, [cluster]
    for feature in features.values():
        feature.attach(parts)
    return parts


def build_world(
    pools: Iterable[PoolSpec], policy: PolicySettings, signals: SignalSettings, transfer: TransferSettings,
    loop: EventLoop, recorder: Recorder, *, seed: int, fast_forward: bool = True, slo: SloDefaults,
    frontend: FrontendSettings | None = None, cells: CellSettings | None = None, runtimes: tuple = (),
) -> World:
    """A world built from settings by hand (the tests' small worlds): the cluster or the cells' fleet, with
    autoscaling and the batching runtimes if the pools have them, and no run-level feature (no window,
    no timeline)."""
    parts = Parts(
        tuple(pools), policy, signals, transfer, slo, frontend, loop, recorder, seed=seed,
        fast_forward=fast_forward, cells=cells, runtimes=tuple(runtimes), typed=bool(runtimes),
    )
    return assemble(parts).world
