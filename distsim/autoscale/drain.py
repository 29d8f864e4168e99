"""Draining: a replica scaled down takes no new request (it is no longer a candidate) but finishes what it
holds, then leaves. While it drains, each of its engines has a departure listener
(distsim.instance.departure), so the controller checks for the end right after each request leaves it (a
completion, a drop, a hedged copy let go, or under P/D the end of a KV hand-off; every evaluation checks
too); the listener goes when the replica leaves, so no other engine pays anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.instance.departure import Departure, DepartureListener
    from distsim.instance.instance import Instance
    from distsim.protocols import Replica
    from distsim.request import Request
    from distsim.signals.view import RouterState


def engine_idle(inst: Instance, state: RouterState, i: int) -> bool:
    """Nothing is routed to instance ``i``, in transit to it, queued, running, loading, or held for a
    hand-off there."""
    return (
        state.outstanding[i] == 0 and state.in_transit[i] == 0 and not inst.running and not len(inst.waiting)
        and not inst.landed and not inst.loading and not inst.held and not inst.reserved and not inst.awaiting_blocks
    )


class DrainListeners:
    """The departure listeners of draining units (engines, or runtime replicas), by unit number."""

    def __init__(self) -> None:
        self._listening: dict[int, tuple[Replica, DepartureListener]] = {}

    def attach(self, unit: Replica, number: int, poke: Callable[[], None]) -> None:
        """``poke()`` after each request that leaves ``unit`` (it has a ``departure_listeners`` list)."""

        def departed(req: Request, now: int, how: Departure) -> None:
            poke()

        unit.departure_listeners.append(departed)
        self._listening[number] = (unit, departed)

    def detach(self, number: int) -> None:
        unit, departed = self._listening.pop(number)
        unit.departure_listeners.remove(departed)
