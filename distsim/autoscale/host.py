"""What the autoscaler needs of what it scales: a pool's settings, and the LLM cluster its replicas live in.

Why here: autoscaling sits below the packages whose pools it scales. distsim.cluster resolves each pool's
``autoscale`` node with this package's settings, and distsim.runtime scales its batching replicas with this
package's controller, so neither may be imported from here. Both offer these members as they are
(distsim.cluster.pools.PoolSpec and distsim.runtime.settings.RuntimePoolSpec a pool's, distsim.cluster.cluster.Cluster
the cluster's); the autoscaler reads nothing else of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from distsim.autoscale.settings import AutoscaleSettings
    from distsim.events.loop import EventLoop
    from distsim.instance.instance import Instance
    from distsim.policies.base import Admission, Router
    from distsim.request import Request
    from distsim.signals.board import SignalBoard
    from distsim.signals.prefix_index import PrefixIndex
    from distsim.signals.view import ClusterView, RouterState


class ScalablePool(Protocol):
    """A pool as the controller scales it: its name (the random stream's and the timeline's), the replicas
    asked for at first, the engines in one replica, and its autoscale settings (None: a fixed pool)."""

    @property
    def name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def data_parallel_size(self) -> int: ...

    @property
    def autoscale(self) -> AutoscaleSettings | None: ...


class LlmPool(ScalablePool, Protocol):
    """An LLM pool: an autoscaled one is built with its ``max`` replicas, of which ``count`` serve at first."""

    @property
    def built_count(self) -> int: ...


class ScaledCluster(Protocol):
    """The LLM cluster as the autoscaler reads and wires it: its engines, board and router state, the views
    and policies whose candidates follow the serving replicas, and the listener lists it subscribes to."""

    loop: EventLoop
    instances: Sequence[Instance]
    board: SignalBoard
    state: RouterState
    prefix_index: PrefixIndex | None  # forgets a replica that leaves
    disaggregated: bool
    entry_view: ClusterView
    router: Router
    admission: Admission
    decode_view: ClusterView | None  # P/D: the decode role's
    decode_router: Router | None
    record_listeners: list[Callable[[Request], None]]
    drained_listeners: list[Callable[[], None]]
    autoscaler: object | None  # set by attach_autoscaler

    def active(self) -> bool:
        """Whether the cluster has anything left to do."""
        ...
