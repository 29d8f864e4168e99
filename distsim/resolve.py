"""Resolve, then build: the whole composed config becomes one frozen, typed :class:`Scenario`.

:func:`resolve` composes what each feature checks of its own config section into frozen settings in its
own package: the simulation's controls (distsim.config.settings), the fitness (distsim.metrics.settings), the
signals, the P/D link, the front end and the policies (distsim.cluster.settings), the batching-runtime pools
(distsim.runtime.settings), the vLLM pools with their catalog entries, KV capacity and step-time models
(distsim.cluster.pools, with the engine checks of distsim.cluster.checks and each pool's autoscaling,
distsim.autoscale.settings), the cells (distsim.cells.settings), the workload (read through once) and its SLO
defaults (distsim.workload.settings), then the checks that span features: each feature the config names checks the whole scenario
(distsim.world.check: hedging against the pools and the SLO, autoscaling against the cells), and
prefix routing is checked against the engines (below). It returns values only:
nothing that simulates exists yet. A mistake anywhere is a ConfigError or InputFileError before the first event; a sweep
driver resolves each configuration before its first job for the same reason. :func:`distsim.simulate.run`
then builds the world from the scenario.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from distsim.cells import settings as cells_settings
from distsim.cells.settings import CellSettings
from distsim.cluster import settings as cluster_settings
from distsim.cluster.pools import PoolSpec, resolve_pools
from distsim.config.known_keys import check_known_keys
from distsim.config.settings import SimSettings, sim_settings, with_request_warmup
from distsim.errors import warn_config
from distsim.metrics import settings as metrics_settings
from distsim.provenance import scope as provenance_scope
from distsim.request import Request
from distsim.signals import settings as signal_settings
from distsim.workload.settings import slo_defaults
from distsim.world import check as check_features
from distsim.world import settings_of as feature_settings

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
    from distsim.metrics.settings import FitnessSettings
    from distsim.runtime.settings import RuntimePoolSpec
    from distsim.signals.settings import SignalSettings
    from distsim.workload.settings import SloDefaults


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, checked and typed."""

    pools: tuple[PoolSpec, ...]  # one per vLLM pool, in config order
    workload: Iterable[Request]  # a restartable request source (or a fixed list the caller gave)
    policy: PolicySettings
    signals: SignalSettings
    transfer: TransferSettings
    frontend: FrontendSettings
    fitness: FitnessSettings
    sim: SimSettings
    slo: SloDefaults
    cells: CellSettings = CellSettings()  # the cell layer (count 1: none)
    runtimes: tuple[RuntimePoolSpec, ...] = ()  # batching-runtime pools (none: LLM only)
    typed: bool = False  # request types in play (workload.mix, or typed requests given): type columns and summary
    features: Mapping[str, object] = field(default_factory=dict)  # the settings of features that resolve their own, by name

    @property
    def seed(self) -> int:
        return self.sim.seed


def resolve(cfg: DictConfig, requests: Iterable[Request] | None = None) -> Scenario:
    """Check the composed config ``cfg`` (see load_config) and resolve it into a Scenario.

    ``requests`` replaces the configured workload (tests and validation feed exact request lists);
    the workload config is then not read.
    """
    check_known_keys(cfg)  # a config composed elsewhere than load_config (a sweep's, the search's)
    with provenance_scope(cfg):  # "set but not used" warnings: only for keys the user set
        return _resolve(cfg, requests)


def _resolve(cfg: DictConfig, requests: Iterable[Request] | None) -> Scenario:
    sim = sim_settings(cfg)
    fitness = metrics_settings.fitness(cfg.fitness)
    signals = signal_settings.signals(cfg.signals)
    transfer = cluster_settings.transfer(cfg.cluster.kv_transfer)
    frontend = cluster_settings.frontend(cfg.cluster.frontend)
    policy = cluster_settings.policy(cfg.policy)
    runtimes: tuple[RuntimePoolSpec, ...] = ()
    if cfg.cluster.pools:  # a list of pools may hold batching runtimes (imported only then: it costs every run)
        from distsim.runtime.settings import resolve_runtime_pools

        runtimes = resolve_runtime_pools(cfg.cluster)
    pools = tuple(resolve_pools(cfg.cluster))
    prefix_routing_needs_caching(policy, pools)
    if any(r.mig is not None for r in runtimes):  # runtime slices share GPUs with the vLLM pools' slices
        from distsim.cluster.mig import place_pools

        place_pools([*pools, *runtimes])
    cells = cells_settings.cells(cfg.cluster.cells, pools)
    if requests is None:
        from distsim.workload import build_workload

        requests = build_workload(cfg.workload, seed=sim.seed, block_size=pools[0].engine.block_size)
    sim = with_request_warmup(cfg, sim, requests)  # sim.warmup_requests: the window starts at a request's arrival
    slo = slo_defaults(cfg.workload)
    typed = False
    if runtimes or getattr(requests, "mix", None) is not None or getattr(requests, "types_seen", None) \
            or isinstance(requests, (list, tuple)):
        from distsim.runtime.checks import check_types

        typed = check_types(requests, runtimes, pools, cells)
    scenario = Scenario(pools, requests, policy, signals, transfer, frontend, fitness, sim, slo, cells, runtimes, typed,
                        feature_settings(cfg))
    check_features(scenario)  # each feature the config names refuses what it cannot compose with
    return scenario


def prefix_routing_needs_caching(policy: PolicySettings, pools: Sequence[PoolSpec]) -> None:
    """Warn when a router scores prefix-cache hits but no instance caches prefixes."""
    routing = policy.routing
    if routing.cls.reads_prefix_index(routing.params) and not any(p.engine.enable_prefix_caching for p in pools):
        warn_config(
            "policy.routing.kind",
            f"{routing.kind} routes on prefix-cache hits, but cluster.engine.enable_prefix_caching is false: "
            "no instance caches a prefix, so its prefix scores only concentrate load",
        )
