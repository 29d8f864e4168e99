"""Requests of every type through one front: LLM requests to the LLM cluster, the others to the runtimes
that serve their type, each type with its own view and its own instance of the configured router.

Why a front over the cluster rather than inside it: an LLM-only run never builds one, so it pays nothing
per request for types. Each type's router sees only that type's replicas (as P/D gives the prefill and the
decode router a view each) and draws from its own stream ("router/TYPE"). Admission and hedging are the LLM
cluster's: a non-LLM request is routed at once (after the routing latency, if any); Triton has no admission
beyond its queue. The front offers the run the world's face (distsim.protocols.World: the cluster's engines, pools and
listeners), and holds the runtimes (``runtimes``) and the non-LLM requests' counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.cluster.cluster import Cluster, Intake
from distsim.errors import SimulationError
from distsim.events.loop import PRIO_CLUSTER, EventLoop
from distsim.instance.departure import Departure
from distsim.policies.base import Router, target_of
from distsim.protocols import RecordSink
from distsim.request import Request, Status
from distsim.runtime.replica import RuntimeReplica
from distsim.signals.board import SignalBoard
from distsim.signals.view import ClusterView, RouterState

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class TypeRoute:
    """One request type's replicas (in pool order), their signal board, router state, view and router."""

    name: str
    replicas: list[RuntimeReplica]
    board: SignalBoard
    state: RouterState
    view: ClusterView
    router: Router


class TypedFront(Intake):
    def __init__(self, cluster: Cluster, routes: dict[str, TypeRoute], loop: EventLoop, recorder: RecordSink,
                 dispatch_us: int):
        self.cluster, self.routes, self.loop, self.recorder = cluster, routes, loop, recorder
        self.instances, self.pool_of, self.listeners = cluster.instances, cluster.pool_of, cluster.listeners
        self.dispatch_us = dispatch_us
        self.runtimes = sorted((r for route in routes.values() for r in route.replicas), key=lambda r: r.index)
        for route in routes.values():
            for local, replica in enumerate(route.replicas):
                replica.departure_listeners.append(self._done_handler(route, local))
        self.record_listeners = [recorder.done]  # then an autoscaler's (distsim.runtime.autoscaling)
        self.first_arrival_us: int | None = None
        self.arrived = 0  # non-LLM requests (the cluster counts its own)
        self.recorded = 0
        self._transit: dict[int, tuple[Request, TypeRoute, int]] = {}
        self._source = None
        self._exhausted = False

    def decision_table(self) -> pd.DataFrame | None:
        return self.cluster.decision_table()  # the LLM requests' decisions

    # ------------------------------------------------------------------ arrivals
    def feed(self, requests: Iterable[Request]) -> None:
        self._source = iter(requests)
        self.cluster.board.start(self.cluster.active)
        for route in self.routes.values():
            route.board.start(self.active)
        self._pull()

    def _pull(self) -> None:
        super()._pull()
        if self._exhausted:  # the cluster's scrapes and hedge timers stop on its own count once arrivals end
            self.cluster.end_arrivals()

    def active(self) -> bool:
        """Whether the front has anything left to do: arrivals to come, or requests not yet recorded."""
        return not self._exhausted or self.arrived > self.recorded

    def accept(self, now: int, req: Request) -> None:
        route = self.routes.get(req.rtype)
        if route is None:  # an LLM request (resolve checked that every other type has a route)
            self.cluster.accept(now, req)
            return
        self.arrived += 1
        req.route_us = now
        local = target_of(route.router.route(req, route.view))  # a runtime replica has no priority queue
        route.state.outstanding[local] += 1
        if self.dispatch_us:
            route.state.in_transit[local] += 1
            self._transit[req.request_id] = (req, route, local)
            self.loop.schedule(now + self.dispatch_us, PRIO_CLUSTER, self._deliver, req.request_id)
        else:
            route.replicas[local].enqueue(req, now)

    def _deliver(self, now: int, rid: int) -> None:
        req, route, local = self._transit.pop(rid)
        route.state.in_transit[local] -= 1
        route.replicas[local].enqueue(req, now)

    def _done_handler(self, route: TypeRoute, local: int):
        def done(req: Request, now: int, how: Departure) -> None:
            route.state.outstanding[local] -= 1
            self._record(req)

        return done

    def _record(self, req: Request) -> None:
        self.recorded += 1
        for listener in self.record_listeners:
            listener(req)

    # ------------------------------------------------------------------ end of run
    def finish(self, horizon_us: int | None) -> None:
        self.cluster.finish(horizon_us)
        pending = {req.request_id: req for req, _, _ in self._transit.values()}
        for replica in self.runtimes:
            if horizon_us is not None:
                replica.settle(horizon_us)
            pending.update((r.request_id, r) for r in replica.in_flight())
        for rid in sorted(pending):
            pending[rid].status = Status.UNFINISHED
            self._record(pending[rid])

    def warn_refusals(self) -> None:
        self.cluster.warn_refusals()
        dropped = sum(r.stats.dropped for r in self.runtimes)
        if dropped:
            from distsim.errors import warn_config

            warn_config("cluster.pools", f"{dropped} non-LLM requests had more items than their runtime's max_batch_size "
                        "and were dropped")

    def check_invariants(self) -> dict[int, str]:
        """The cluster's invariants (INV-1 over LLM requests), each replica's (INV-26), and INV-1 over the
        non-LLM requests: each is recorded, on its way, queued or in a running batch, in one place only."""
        places = self.cluster.check_invariants()
        mine: dict[int, str] = {rid: "dispatching" for rid in self._transit}
        for replica in self.runtimes:
            replica.check_invariants()
            for req in replica.in_flight():
                if req.request_id in mine or req.request_id in places:
                    raise SimulationError(f"INV-1: request {req.request_id} in two places (runtime {replica.index})")
                mine[req.request_id] = f"on runtime {replica.index}"
        if self.arrived != self.recorded + len(mine):
            raise SimulationError(f"INV-1: non-LLM requests not conserved: {self.arrived} arrived != "
                                  f"{self.recorded} recorded + {len(mine)} in flight")
        places.update(mine)
        return places
