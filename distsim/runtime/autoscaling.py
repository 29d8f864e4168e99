"""Autoscaling the batching runtimes' pools (distsim.runtime) with the LLM cluster's autoscaler.

Why one autoscaler for both: the run has one billing, one timeline and one moment to stop (nothing left to
do for either side). The front's runtime replicas are numbered after the cluster's instances, so their
global indices are instances.parquet's rows and billing needs nothing new. Each type's replicas are a
side of their own (RuntimeSide, below): their type's board, router state and view.
A scaler of a runtime pool reads queue depth (requests queued at a replica plus on their way to it),
running (requests in running batches) and outstanding (routed and not finished) per serving replica,
and queue_slo's miss rate counts results later than their type's latency SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from distsim.autoscale.controller import Autoscaler
from distsim.autoscale.drain import DrainListeners
from distsim.autoscale.probe import LatencyWatch
from distsim.autoscale.replicas import SERVING

if TYPE_CHECKING:
    from distsim.autoscale.replicas import Replica
    from distsim.runtime.front import TypedFront, TypeRoute
    from distsim.runtime.settings import RuntimePoolSpec


def attach_runtime_autoscaling(front: TypedFront, pools: Sequence[RuntimePoolSpec], seed: int) -> Autoscaler:
    """Scale ``front``'s autoscaled runtime ``pools`` (built with ``max`` replicas each), with the cluster's
    autoscaler if it has one (else a new one, set as ``cluster.autoscaler``), which from now stops only once
    neither the LLM cluster nor the runtimes have anything left to do."""
    cluster = front.cluster
    autoscaler = cluster.autoscaler  # the LLM pools' autoscaler, if any (a fleet has none)
    if autoscaler is None:
        autoscaler = Autoscaler(cluster, [], seed)
        cluster.drained_listeners.append(autoscaler.drained)
        cluster.autoscaler = autoscaler
    front.record_listeners.append(autoscaler.request_recorded)
    autoscaler.units += len(front.runtimes)
    autoscaler.also_active(front.active)
    sides = {name: RuntimeSide(route) for name, route in front.routes.items()}
    added = []
    for spec in pools:
        if spec.autoscale is None:
            continue
        engines = [(r.index,) for r in front.runtimes if r.pool is spec]
        watch = LatencyWatch({e for (e,) in engines})
        front.record_listeners.append(watch.heard)
        added.append(autoscaler.add(spec, engines, watch, sides[spec.serves], seed))
    autoscaler.start(added)
    return autoscaler


class RuntimeSide:
    """One request type's runtime replicas (a distsim.runtime.front.TypeRoute), as the autoscaler's controller
    sees a side (distsim.autoscale.sides.Side): its board, router state and view index a replica by its
    position in the route. A replica holds no cache, so leaving empties nothing (its type's requests carry
    no prompt, so the route's prefix index, if any, stays empty)."""

    def __init__(self, route: TypeRoute):
        self.route = route
        self.board, self.state = route.board, route.state
        self.position = {r.index: k for k, r in enumerate(route.replicas)}
        self.serving = np.ones(len(route.replicas), dtype=bool)
        self.draining = DrainListeners()

    def local(self, engines: Iterable[int]) -> list[int]:
        return [self.position[e] for e in engines]

    def idle(self, e: int) -> bool:
        """Nothing routed to the replica, on its way there, queued, or in a running batch."""
        k = self.position[e]
        replica = self.route.replicas[k]
        return (self.state.outstanding[k] == 0 and self.state.in_transit[k] == 0 and not replica.running
                and not len(replica.batcher))

    def drain(self, e: int, poke: Callable[[], None]) -> None:
        self.draining.attach(self.route.replicas[self.position[e]], e, poke)

    def leave(self, e: int) -> None:
        self.draining.detach(e)

    def update(self, replicas: Iterable[Replica]) -> None:
        for replica in replicas:
            self.serving[self.local(replica.engines)] = replica.state == SERVING
        view = self.route.view
        new, old = np.flatnonzero(self.serving), view.members
        if new.size == old.size and np.array_equal(new, old):
            return
        view.set_members(new)
        self.route.router.members_changed(old, new)

    def candidates(self) -> set[int]:
        return {self.route.replicas[int(k)].index for k in self.route.view.members}

