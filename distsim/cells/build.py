"""Assemble the cell layer: the pools split equally among the cells, a cluster per cell (its own signal
board, router state, routers, prefix index and admission, each policy on its own stream, e.g.
"router/cell/17"), the network, the directory and the front router ("cells/front").

Instances are numbered cell by cell (cell c holds instances c x size .. (c + 1) x size - 1, in pool order
inside the cell), so each cell's instances are consecutive and a cell's cluster numbers them from 0.
Building a large fleet makes millions of small objects; the cyclic garbage collector would traverse all of
them again and again while they are made (most of the build time at 100,000 instances), so it is paused
during the build, and what was built is then frozen (``gc.freeze``: left out of collections) until the
fleet's end of run unfreezes it into the oldest generation, where it can be collected once the run is over.
Without the freeze, the first collections after the build would still walk the whole fleet (seconds at
131,072 instances) on their way to promote it.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from distsim.cells.base import FrontContext
from distsim.cells.directory import CellDirectory
from distsim.cells.fleet import Fleet
from distsim.cells.network import Network
from distsim.cells.settings import CellSettings
from distsim.cluster.build import assemble, build_instances
from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
from distsim.events.loop import EventLoop
from distsim.events.rng import stream
from distsim.instance.instance import Instance
from distsim.signals.settings import SignalSettings
from distsim.workload.settings import SloDefaults

if TYPE_CHECKING:
    from distsim.cluster.pools import PoolSpec
    from distsim.protocols import RecordSink


def build_fleet(
    pools: Sequence[PoolSpec], policy: PolicySettings, signals: SignalSettings, transfer: TransferSettings,
    loop: EventLoop, recorder: RecordSink, *, seed: int, fast_forward: bool, slo: SloDefaults,
    frontend: FrontendSettings | None, cells: CellSettings, instance_cls: type[Instance] = Instance,
) -> Fleet:
    """The fleet of ``cells.count`` cells, each an equal share of every pool (checked to divide)."""
    n = cells.count
    share = [dataclasses.replace(pool, count=pool.count // n) for pool in pools]
    size = sum(pool.count * pool.data_parallel_size for pool in share)  # engines per cell
    groups = sum(pool.count for pool in share)  # configured instances (DP groups) per cell
    collecting = gc.isenabled()
    gc.disable()
    try:
        clusters = []
        for c in range(n):
            instances, pool_of = build_instances(
                share, loop, fast_forward, first=c * size, first_group=c * groups, instance_cls=instance_cls,
                cancellable=policy.hedge.enabled, seed=seed,
            )
            clusters.append(assemble(  # the fleet subscribes to each cell's records
                instances, pool_of, policy, signals, transfer, loop, None, seed=seed, slo=slo, frontend=frontend,
                suffix=f"/cell/{c}",
            ))
        network = Network(cells, seed)
        directory = CellDirectory([size] * n, cells, loop, stream(seed, "cells/summaries"), network.rtt_us)
        front = cells.front(FrontContext(n, stream(seed, "cells/front")))
        fleet = Fleet(clusters, network, directory, front, cells, loop, recorder)
    finally:
        if collecting:
            gc.enable()
    if collecting:
        gc.freeze()  # Fleet.finish unfreezes
    return fleet
