"""Where an autoscaled pool's replicas live: the LLM cluster's engines, or one request type's batching-runtime
replicas (distsim.runtime). The controller scales both the same way; a side says what differs: which board
and router state its scaler reads (indexed by the side's own position of a unit), when a unit is idle, how
a draining unit tells it something left, what leaving empties, and how its routers' candidates follow.

An engine (unit) is named by its global index everywhere in the controller (instances.parquet's row, the
billing); ``local`` turns it into the side's index for the board and router state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from distsim.autoscale.drain import DrainListeners, engine_idle
from distsim.autoscale.membership import Membership
from distsim.autoscale.replicas import SERVING

if TYPE_CHECKING:
    from distsim.autoscale.replicas import Replica
    from distsim.cluster.cluster import Cluster
    from distsim.runtime.front import TypeRoute


class LlmSide:
    """The LLM cluster's instances: an engine's global index is its index on the cluster's board and router
    state; the cluster's views (one per P/D role) follow the serving replicas."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.instances = cluster.instances
        self.board, self.state = cluster.board, cluster.state
        self.serving = np.ones(len(self.instances), dtype=bool)  # fixed pools always serve
        self.membership = Membership(cluster)
        self.draining = DrainListeners()

    def local(self, engines: Iterable[int]) -> list[int]:
        return list(engines)

    def idle(self, e: int) -> bool:
        return engine_idle(self.instances[e], self.state, e)

    def drain(self, e: int, poke: Callable[[], None]) -> None:
        self.draining.attach(self.instances[e], e, poke)

    def leave(self, e: int) -> None:
        """The engine's drain listener goes, its caches are emptied and the router's prefix index forgets it."""
        self.draining.detach(e)
        self.instances[e].forget_caches()
        index = self.cluster.prefix_index
        if index is not None:
            index.forget(e)

    def update(self, replicas: Iterable[Replica]) -> None:
        for replica in replicas:
            self.serving[list(replica.engines)] = replica.state == SERVING
        self.membership.update(self.serving)

    def candidates(self) -> set[int]:
        members: set[int] = set()
        for view, _, _ in self.membership.groups:
            members.update(int(m) for m in view.members)
        return members


class RuntimeSide:
    """One request type's runtime replicas (a distsim.runtime.front.TypeRoute): its board, router state and
    view index a replica by its position in the route. A replica holds no cache, so leaving empties nothing
    (its type's requests carry no prompt, so the route's prefix index, if any, stays empty)."""

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

