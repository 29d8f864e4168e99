"""Where an autoscaled pool's replicas live: the LLM cluster's engines (here), or one request type's
batching-runtime replicas (distsim.runtime.autoscaling.RuntimeSide). The controller scales both the same way; a side says what differs: which board
and router state its scaler reads (indexed by the side's own position of a unit), when a unit is idle, how
a draining unit tells it something left, what leaving empties, and how its routers' candidates follow.

An engine (unit) is named by its global index everywhere in the controller (instances.parquet's row, the
billing); ``local`` turns it into the side's index for the board and router state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from distsim.autoscale.drain import DrainListeners, engine_idle
from distsim.autoscale.membership import Membership
from distsim.autoscale.replicas import SERVING

if TYPE_CHECKING:
    from distsim.autoscale.host import ScaledCluster
    from distsim.autoscale.replicas import Replica
    from distsim.signals.board import SignalBoard
    from distsim.signals.view import RouterState


class Side(Protocol):
    """What the controller asks of the place an autoscaled pool's replicas live (LlmSide here; the batching
    runtimes' RuntimeSide in distsim.runtime.autoscaling, above this package)."""

    board: SignalBoard  # what its scalers read, indexed by ``local``
    state: RouterState

    def local(self, engines: Iterable[int]) -> list[int]: ...

    def idle(self, e: int) -> bool: ...

    def drain(self, e: int, poke: Callable[[], None]) -> None: ...

    def leave(self, e: int) -> None: ...

    def update(self, replicas: Iterable[Replica]) -> None: ...

    def candidates(self) -> set[int]: ...


class LlmSide:
    """The LLM cluster's instances: an engine's global index is its index on the cluster's board and router
    state; the cluster's views (one per P/D role) follow the serving replicas."""

    def __init__(self, cluster: ScaledCluster):
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
