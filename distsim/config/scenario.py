"""Resolve, then build: the whole composed config becomes one frozen, typed :class:`Scenario`.

:func:`resolve` checks every section (:mod:`distsim.config.checks`), loads the model and hardware
catalogs, derives the KV capacity of each pool, builds the step-time models and validates the workload
(reading a trace through once), and returns values only: nothing that simulates exists yet. A mistake
anywhere is a ConfigError or InputFileError before the first event; a sweep driver resolves each
configuration before its first job for the same reason. :func:`distsim.simulate.run` then builds the
world from the scenario.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from distsim.config import checks
from distsim.config.settings import (
    CellSettings,
    FitnessSettings,
    FrontendSettings,
    PolicySettings,
    SignalSettings,
    SimSettings,
    SloDefaults,
    TransferSettings,
)
from distsim.request import Request


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, checked and typed."""

    pools: tuple[Any, ...]  # distsim.cluster.pools.PoolSpec, one per pool, in config order
    workload: Iterable[Request]  # a restartable request source (or a fixed list the caller gave)
    policy: PolicySettings
    signals: SignalSettings
    transfer: TransferSettings
    frontend: FrontendSettings
    fitness: FitnessSettings
    sim: SimSettings
    slo: SloDefaults
    cells: CellSettings = CellSettings()  # the cell layer (count 1: none)
    runtimes: tuple[Any, ...] = ()  # distsim.runtime.settings.RuntimePoolSpec: batching-runtime pools (none: LLM only)
    typed: bool = False  # request types in play (workload.mix, or typed requests given): type columns and summary

    @property
    def seed(self) -> int:
        return self.sim.seed


def resolve(cfg: Any, requests: Iterable[Request] | None = None) -> Scenario:
    """Check the composed config ``cfg`` (see load_config) and resolve it into a Scenario.

    ``requests`` replaces the configured workload (tests and validation feed exact request lists);
    the workload config is then not read.
    """
    from distsim.autoscale.settings import refuse_unsupported
    from distsim.cluster.pools import resolve_pools

    sim = checks.sim(cfg)
    fitness = checks.fitness(cfg.fitness)
    signals = checks.signals(cfg.signals)
    transfer = checks.transfer(cfg.cluster.kv_transfer)
    frontend = checks.frontend(cfg.cluster.frontend)
    policy = checks.policy(cfg.policy)
    runtimes: tuple = ()
    if cfg.cluster.pools:  # a list of pools may hold batching runtimes (imported only then: it costs every run)
        from distsim.runtime.settings import resolve_runtime_pools

        runtimes = resolve_runtime_pools(cfg.cluster)
    pools = tuple(resolve_pools(cfg.cluster))
    checks.prefix_routing_needs_caching(policy, pools)
    if any(r.mig is not None for r in runtimes):  # runtime slices share GPUs with the vLLM pools' slices
        from distsim.cluster.mig import place_pools

        place_pools([*pools, *runtimes])
    cells = checks.cells(cfg.cluster.cells, pools)
    refuse_unsupported(cells, sim, pools)
    if requests is None:
        from distsim.workload import build_workload

        requests = build_workload(cfg.workload, seed=sim.seed, block_size=pools[0].engine.block_size)
    slo = checks.slo_defaults(cfg.workload)
    checks.hedging_fits(policy, pools, slo)
    typed = False
    if runtimes or getattr(requests, "mix", None) is not None or getattr(requests, "types_seen", None) \
            or isinstance(requests, (list, tuple)):
        from distsim.runtime.checks import check_types

        typed = check_types(requests, runtimes, pools, cells)
    return Scenario(pools, requests, policy, signals, transfer, frontend, fitness, sim, slo, cells, runtimes, typed)
