"""The cluster: requests arrive, pass admission, are routed and reach their instance.

Mixed clusters route each request to one instance. Under P/D disaggregation (pools with roles
prefill and decode) the prefill router and the decode router, each over its own pool, pick both
instances at arrival; the prefill instance computes the prompt and samples the first token; the
decode instance reserves blocks for the prompt's KV in its next step's admission, the KV moves over the link
(latency + bytes / bandwidth, bytes of the prompt's KV per GPU), blocks held on both sides until it
lands; then the first token reaches the user (TTFT includes the transfer) and decoding proceeds. With a
P/D decider (policy.pd_decider) the decode instance is routed first and a short uncached prompt prefills on
it, as on a mixed engine, with no transfer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distsim.cluster.data_parallel import DataParallelBalancer
from distsim.cluster.hedging import Hedger, HedgeTimers
from distsim.cluster.settings import FrontendSettings, PolicySettings, TransferSettings
from distsim.errors import SimulationError, warn_config
from distsim.events.loop import PRIO_ARRIVAL, PRIO_CLUSTER, EventLoop
from distsim.instance.departure import Departure
from distsim.instance.instance import Instance
from distsim.policies.base import Route, Router, routed_priority, target_of
from distsim.request import Request, Status
from distsim.signals.board import SignalBoard
from distsim.signals.prefix_index import PrefixIndex
from distsim.signals.view import ClusterView, RouterState
from distsim.workload.base import DrivenSource

FINISHED, ABORTED = Departure.FINISHED, Departure.ABORTED

NO_FRONTEND = FrontendSettings(request_us=0.0, per_input_token_us=0.0, per_output_token_us=0.0)  # the engine's own times


@dataclass
class Routes:
    """The router(s) and their views: one over every instance, or under P/D one over the prefill pool
    (the entry) and one over the decode pool; and the router-side prefix index, if a router reads it."""

    entry_view: ClusterView
    router: Router
    decode_view: ClusterView | None = None
    decode_router: Router | None = None
    prefix_index: PrefixIndex | None = None


# told of each request the cluster records with its final status (completed, rejected, dropped, unfinished),
# in subscription order: the run's recorder (of the metrics package) first, then an autoscaler's
RecordListener = Callable[[Request], None]


class RecordSink(Protocol):
    """What the assembly subscribes to a cluster's records: the run's recorder, or a cell's sink."""

    def done(self, req: Request) -> None: ...


class ClusterListener(Protocol):
    """What a cluster tells the listeners on its ``listeners`` list (the metrics package's timeline is one) of
    events no table keeps; a listener reads, never writes. Instance numbers are global."""

    def handed_off(self, req: Request, now: int) -> None:
        """P/D: the prefill instance computed ``req``'s prompt and holds its KV."""

    def kv_transfer(self, req: Request, start_us: int, duration_us: int, nbytes: float) -> None:
        """P/D: the KV of ``req`` leaves its prefill instance for its decode instance (``req.instance``)."""

    def hedged(self, now: int, req: Request, copy: Request, source: int, target: int) -> None:
        """A hedge: ``copy`` of ``req`` (first sent to instance ``source``) goes to instance ``target``."""


class Intake:
    """Requests streamed into the loop: one pending arrival event at a time, so memory does not grow with
    them. Each arrival goes to ``accept`` (the cluster's admission and routing, or the cell layer's front)."""

    loop: EventLoop
    first_arrival_us: int | None
    _source: Iterator[Request] | None
    _exhausted: bool

    def _start(self, requests: Iterable[Request]) -> None:
        """Begin the arrivals: pull the first request of a source in a fixed order, or hand a driven source
        (closed-loop clients, distsim.workload.base.DrivenSource) this intake, to send its own."""
        if isinstance(requests, DrivenSource):
            self._source = iter(())
            requests.drive(self)
        else:
            self._source = iter(requests)
            self._pull()

    def arrive(self, now: int, req: Request) -> None:
        """A driven source sends ``req`` now (its own arrival event, at PRIO_ARRIVAL)."""
        if self.first_arrival_us is None:
            self.first_arrival_us = now
        self.accept(now, req)

    def _pull(self) -> None:
        req = next(self._source, None)
        if req is None:
            self._exhausted = True
        else:
            self.loop.schedule(req.arrival_us, PRIO_ARRIVAL, self._on_arrival, req)

    def _on_arrival(self, now: int, req: Request) -> None:
        if self.first_arrival_us is None:
            self.first_arrival_us = now
        self._pull()
        self.accept(now, req)

    def accept(self, now: int, req: Request) -> None:
        raise NotImplementedError

    def end_arrivals(self) -> None:
        """No request will arrive any more (a front that feeds this intake ran out of them)."""
        self._exhausted = True


class Cluster(Intake):
    """The cluster's event handlers: arrival, admission, routing, dispatch, P/D hand-off, completion.
    Assembled by :func:`distsim.cluster.build.build_cluster` from resolved settings.

    Who listens: ``record_listeners`` hear of each request's final status (the recorder subscribes when the
    cluster is assembled, an autoscaler's watches when it attaches); ``drained_listeners`` hear once that
    the run is drained (its own timer drop, an autoscaler's stop); ``listeners`` (:class:`ClusterListener`) of
    hand-offs, KV transfers and hedges. The cluster is itself the first departure listener of each of its
    instances (:meth:`Instance.connect`)."""

    def __init__(
        self,
        instances: list[Instance],
        pool_of: list[Any],
        board: SignalBoard,
        state: RouterState,
        routes: Routes,
        admission: Any,
        policy: PolicySettings,
        transfer: TransferSettings,
        loop: EventLoop,
        frontend: FrontendSettings = NO_FRONTEND,
        hedger: Hedger | None = None,
    ):
        self.loop = loop
        self.record_listeners: list[RecordListener] = []
        # the one "run drained" event (see _check_drained): told once, in subscription order
        self.drained_listeners: list[Callable[[], None]] = []
        self._drained = False
        self.instances, self.pool_of = instances, pool_of
        # global number of instances[0]: a cell's cluster numbers its instances from 0 internally (its
        # board, router state, views and prefix index are the cell's size) and requests carry global numbers
        self.base = instances[0].index
        self.board, self.state = board, state
        self.entry_view, self.router = routes.entry_view, routes.router
        self.decode_view, self.decode_router = routes.decode_view, routes.decode_router
        self.prefix_index = routes.prefix_index
        self.admission = admission
        self.disaggregated = self.decode_router is not None
        self.decider = policy.pd_decider if self.disaggregated else None  # P/D: which requests disaggregate
        self.local_prefills = 0  # P/D with a decider: requests prefilled on their decode instance
        self.transfer_bw, self.transfer_latency_us = transfer.bandwidth_bytes_per_s, transfer.latency_us
        self.transfer_compression = transfer.compression  # the share of the KV bytes that crosses the link
        self.dispatch_us = policy.dispatch_us
        self.frontend = frontend if frontend.ingests else None  # ingestion delays each request's dispatch
        self.trace = policy.trace_decisions
        self.dp = DataParallelBalancer(instances, state.in_transit) if DataParallelBalancer.needed(instances) else None
        self._connect(hedger)
        self.decisions: list[tuple] = []
        self.listeners: list[ClusterListener] = []  # told of hand-offs, KV transfers and hedges (a timeline)
        self.autoscaler: Any = None  # the autoscaler, which sets itself here (distsim.autoscale.controller)
        self.arrived = 0  # requests that entered this cluster
        self.recorded = 0  # of them, recorded with their final status
        self.first_arrival_us: int | None = None
        self.transfers, self.transfer_us_total, self.transfer_bytes_total = 0, 0, 0.0  # KV transfers, their time and bytes
        self._source: Iterator[Request] | None = None
        self._exhausted = False
        self._decode_target: dict[int, int] = {}
        self._transit: dict[int, Request] = {}
        self._in_transfer: dict[int, Request] = {}

    def _connect(self, hedger: Hedger | None) -> None:
        """The instances tell this cluster of departures, P/D hand-off steps and, with hedging
        (policy.hedge), first tokens. ``timer_owners``: whose pending timers are dropped when the run is
        drained (the hedge timers, the prefill batchers')."""
        self.hedger = hedger
        self.hedge_timers = HedgeTimers(self._hedge) if hedger is not None else None
        first_token = self._on_first_token if hedger is not None else None
        for inst in self.instances:
            inst.connect(self._departed, prefilled=self._on_prefilled, reserved=self._on_reserved, first_token=first_token)
        batchers = [inst.batcher for inst in self.instances if inst.batcher is not None]
        self.timer_owners = ([self.hedge_timers] if hedger is not None else []) + batchers
        if self.timer_owners:
            self.drained_listeners.append(self._drop_timers)

    def _drop_timers(self) -> None:
        self.loop.drop(*self.timer_owners)  # nothing is left to time: pending timers must not prolong the run

    def end_arrivals(self) -> None:
        super().end_arrivals()
        self._check_drained()

    def _check_drained(self) -> None:
        """The one "run drained" event: arrivals have ended, every request that arrived is recorded and no
        copy of one is outstanding on an instance. Its listeners (the hedge and batch timers dropped, an
        autoscaler's stop) hear of it once; checked after each record and each cancelled copy let go."""
        if self._drained or not self._exhausted or self.recorded != self.arrived or self.state.outstanding.any():
            return
        self._drained = True
        for listener in self.drained_listeners:
            listener()

    @property
    def num_instances(self) -> int:
        return len(self.instances)

    # ------------------------------------------------------------------ arrivals
    def feed(self, requests: Iterable[Request]) -> None:
        """Stream requests in: one pending arrival event at a time, so memory does not grow with them."""
        self.board.start(self.active)
        self._start(requests)

    def active(self) -> bool:
        """Whether the cluster has anything left to do: arrivals to come, or requests outstanding."""
        return not self._exhausted or bool(self.state.outstanding.any())

    def accept(self, now: int, req: Request) -> None:
        """A request enters the cluster (from the workload, or from the cell layer): admission, routing,
        dispatch."""
        self.arrived += 1
        if not self.admission.admit(req, now, self.entry_view):
            req.status = Status.REJECTED
            self._record(req)
            return
        req.route_us = now
        if self.disaggregated:
            target = self._route_pd(req, now)
            if target is None:
                return
        else:
            target = self._route(req, now, self.router, self.entry_view, "mixed")
        self._dispatch(req, target, now)
        if self.hedger is not None:
            self.loop.schedule(now + self.hedger.delay_us(req), PRIO_CLUSTER, self.hedge_timers.fire, (req, target))

    def _route_pd(self, req: Request, now: int) -> int | None:
        """P/D: the instance ``req`` goes to first, its prefill instance, with its decode instance set aside
        for the hand-off; or, decided local (policy.pd_decider, distsim.cluster.pd_decider), its decode
        instance, which prefills it itself. None: dropped, its decode instance could never hold it."""
        if self.decider is None:
            target = self._route(req, now, self.router, self.entry_view, "prefill")
            decode = self._route(req, now, self.decode_router, self.decode_view, "decode")
        else:  # as llm-d: the decode instance first, then whether the prompt is worth a transfer
            decode = self._route(req, now, self.decode_router, self.decode_view, "decode")
            if self.decider.local(req, self.instances[decode]):
                self.local_prefills += 1
                return decode
            target = self._route(req, now, self.router, self.entry_view, "prefill")
        if not self.instances[decode].can_ever_fit(req):
            req.instance = decode + self.base
            req.prefill_instance = target + self.base
            req.status = Status.DROPPED
            self.instances[decode].stats.dropped += 1
            self._record(req)
            return None
        self._decode_target[req.request_id] = decode
        self.state.outstanding[decode] += 1
        req.prefill_instance = target + self.base
        return target

    def _dispatch(self, req: Request, target: int, now: int) -> None:
        """Send a routed request (or a hedge's copy) to instance ``target``, after the dispatch delay."""
        self.state.outstanding[target] += 1
        if self.prefix_index is not None and req.block_hashes:
            self.prefix_index.record(target, req.block_hashes)
        delay = self.dispatch_us
        if self.frontend is not None:
            delay += self.frontend.ingest_us(req.prompt_tokens)
        if delay:
            self.state.in_transit[target] += 1
            self._transit[req.request_id] = req
            self.loop.schedule(now + delay, PRIO_CLUSTER, self._deliver, (req, target))
        else:
            self.instances[target].enqueue(req, now)

    def _route(self, req: Request, now: int, router: Router, view: ClusterView, stage: str) -> int:
        """The chosen instance's number in this cluster (global number minus ``base``)."""
        local = router.route(req, view)
        if local.__class__ is Route:  # the router's priority becomes the request's for its engine
            req.priority = routed_priority(router, local.priority)
            local = local.target
        chosen = int(view.members[local])
        if self.dp is not None:  # the pick names a DP group; vLLM's balancer picks its engine
            chosen = self.dp.pick(chosen)
        if self.trace:
            scores = router.last_scores
            number = chosen + self.base
            if scores is None:
                self.decisions.append((now, req.request_id, stage, number, None, None, None, None))
            else:
                best = float(np.max(scores))
                mine = float(scores[local])
                self.decisions.append((now, req.request_id, stage, number, mine, best, best - mine, [float(x) for x in scores]))
        return chosen

    def _deliver(self, now: int, item: tuple[Request, int]) -> None:
        req, target = item
        if self._transit.pop(req.request_id, None) is None:
            return  # a hedge's copy cancelled on its way
        self.state.in_transit[target] -= 1
        self.instances[target].enqueue(req, now)

    def _departed(self, req: Request, now: int, how: Departure) -> None:
        """A request left one of this cluster's instances: finished there (completed, refused or dropped),
        or a cancelled copy let go; a P/D hand-off's released blocks need nothing here."""
        if how is FINISHED:
            self._on_done(req)
        elif how is ABORTED:
            self._on_aborted(req, now)

    def _on_done(self, req: Request) -> None:
        """An instance finished (completed or dropped) a request."""
        if req.instance >= 0:
            self.state.outstanding[req.instance - self.base] -= 1
        decode = self._decode_target.pop(req.request_id, None)
        if decode is not None:  # P/D: refused or dropped by its prefill instance, never sent to decode
            self.state.outstanding[decode] -= 1
        if self.hedger is not None:
            req = self.hedger.settle(req, self._work_of(req))
            if req is None:
                return  # another copy stands for it
        self._record(req)

    def _record(self, req: Request) -> None:
        self.recorded += 1
        for listener in self.record_listeners:
            listener(req)
        if self._exhausted:
            self._check_drained()

    # ------------------------------------------------------------------ hedging (distsim.cluster.hedging)
    def _hedge(self, now: int, item: tuple[Request, int]) -> None:
        """The hedge timer of a request: still no first token, so another copy goes out (and the timer is
        set again while copies are left)."""
        req, first_target = item
        hedger = self.hedger
        if not hedger.wants_copy(req):
            return
        target = self._copy_target(req, hedger.taken(req, first_target))
        if target is None:
            return  # every instance has a copy
        copy = hedger.new_copy(req, first_target, target)
        copy.route_us = now
        if self.trace:
            self.decisions.append((now, req.request_id, "hedge", target + self.base, None, None, None, None))
        self._dispatch(copy, target, now)
        for listener in self.listeners:
            listener.hedged(now, req, copy, first_target + self.base, target + self.base)
        if hedger.wants_copy(req):
            self.loop.schedule(now + hedger.delay_us(req), PRIO_CLUSTER, self.hedge_timers.fire, item)

    def _copy_target(self, req: Request, taken: list[int]) -> int | None:
        """Where a copy goes (this cluster's numbering): by ``policy.hedge.target`` among the instances
        without a copy of ``req`` (engines chosen directly, past any data-parallel balancer)."""
        view = self.entry_view
        free = ~np.isin(view.members, taken)
        candidates = np.flatnonzero(free)
        if candidates.size == 0:
            return None
        how = self.hedger.settings.target
        if how == "least_outstanding":
            pos = candidates[np.argmin(view.outstanding()[candidates])]
        elif how == "random":
            pos = candidates[self.hedger.rng.integers(candidates.size)]
        else:  # the router's choice; when it names a taken instance, its best-scored (else next) free one
            pos = target_of(self.router.route(req, view))  # a copy keeps the priority its request was given
            if not free[pos]:
                scores = self.router.last_scores
                if scores is not None:
                    pos = candidates[np.argmax(np.asarray(scores)[candidates])]
                else:
                    pos = candidates[np.searchsorted(candidates, pos) % candidates.size]
        return int(view.members[pos])

    def _on_first_token(self, req: Request, now: int) -> None:
        """A copy answered: if first of its request's copies, the others are cancelled now."""
        for copy in self.hedger.first_token(req):
            if self._transit.pop(copy.request_id, None) is not None:  # still on its way: it never arrives
                target = self.hedger.target_of(copy)
                self.state.in_transit[target] -= 1
                self.state.outstanding[target] -= 1
                self.hedger.cancelled_copy(copy, None)
            else:
                self.instances[copy.instance - self.base].cancel(copy, now)

    def _on_aborted(self, req: Request, now: int) -> None:
        """An instance let a cancelled copy go (its blocks are free)."""
        self.state.outstanding[req.instance - self.base] -= 1
        self.hedger.cancelled_copy(req, self._work_of(req))
        if self._exhausted:
            self._check_drained()

    def _work_of(self, req: Request) -> tuple[int, tuple[int, int]] | None:
        """A copy's instance (global number) and its work there, or None while it is being dispatched."""
        if req.instance < 0:
            return None
        return req.instance, self.instances[req.instance - self.base].work_done(req)

    @property
    def hedgers(self) -> list[Hedger]:
        return [] if self.hedger is None else [self.hedger]

    # ------------------------------------------------------------------ P/D hand-off
    def _on_prefilled(self, req: Request, now: int) -> None:
        for listener in self.listeners:
            listener.handed_off(req, now)
        prefill = self.instances[req.prefill_instance - self.base]
        self.state.outstanding[req.prefill_instance - self.base] -= 1
        decode = self._decode_target.pop(req.request_id)
        if req.generated >= req.output_tokens:  # a one-token answer needs no decode instance
            self.state.outstanding[decode] -= 1
            prefill.handoff.release(req, now)
            req.completion_us = now
            req.status = Status.COMPLETED
            self._record(req)
            return
        req.first_token_us = -1  # the first token reaches the user when the KV has landed
        self.instances[decode].handoff.incoming(req, now)

    def _on_reserved(self, req: Request, now: int) -> None:
        """The decode instance holds blocks for the KV: send it."""
        pool = self.pool_of[req.prefill_instance - self.base]
        nbytes = req.prompt_tokens * pool.model.kv_bytes_per_token_per_gpu(pool.tensor_parallel_size) * self.transfer_compression
        duration = math.floor(self.transfer_latency_us + nbytes / self.transfer_bw * 1e6 + 0.5)
        self.transfers += 1
        self.transfer_us_total += duration
        self.transfer_bytes_total += nbytes
        for listener in self.listeners:
            listener.kv_transfer(req, now, duration, nbytes)
        self._in_transfer[req.request_id] = req
        self.loop.schedule(now + duration, PRIO_CLUSTER, self._transfer_done, req)

    def _transfer_done(self, now: int, req: Request) -> None:
        del self._in_transfer[req.request_id]
        self.instances[req.prefill_instance - self.base].handoff.release(req, now)
        req.first_token_us = now
        req.last_token_us = now
        self.instances[req.instance - self.base].handoff.receive(req, now)

    # ------------------------------------------------------------------ end of run
    def finish(self, horizon_us: int | None) -> None:
        """End of the run: settle fast-forwarded runs up to the horizon and record in-flight requests."""
        pending: dict[int, Request] = {}
        for inst in self.instances:
            if horizon_us is not None:
                inst.settle(horizon_us)
            for req in inst.in_flight():
                pending[req.request_id] = req
            for req in inst.awaiting_blocks:
                pending[req.request_id] = req
            pending.update(inst.loading)
        pending.update(self._transit)
        pending.update(self._in_transfer)
        if self.hedger is not None:  # a request's copies collapse into one record
            pending = self.hedger.at_horizon(pending, self._work_of)
        for rid in sorted(pending):
            req = pending[rid]
            req.status = Status.UNFINISHED
            self._record(req)

    def warn_refusals(self) -> None:
        warn_refusals(self.instances, self.arrived)

    def check_invariants(self) -> dict[int, str]:
        """Every instance's invariants, and every arrived request in exactly one place: recorded with its
        final status, dispatching, or on one instance (queued, running, loading from its CPU KV tier, or in
        a P/D hand-off stage);
        blocks are reserved or held only for a request in that hand-off. Raises SimulationError; returns
        where each request in flight is (request id -> place)."""
        places: dict[int, str] = {}

        def put(req: Request, where: str) -> None:
            if req.request_id in places:
                raise SimulationError(f"INV-1: request {req.request_id} both {places[req.request_id]} and {where}")
            places[req.request_id] = where

        for req in self._transit.values():
            put(req, "dispatching")
        for req in self._in_transfer.values():
            put(req, "in KV transfer")
        for inst in self.instances:
            inst.check_invariants()
            for req in inst.in_flight():
                put(req, f"on instance {inst.index}")
            for req in inst.awaiting_blocks:
                put(req, f"awaiting blocks on instance {inst.index}")
            for req in inst.loading.values():
                put(req, f"loading KV from the CPU tier on instance {inst.index}")
        handing_off = set(self._in_transfer) | {rid for rid, where in places.items() if where.startswith("awaiting")}
        for inst in self.instances:
            if not set(inst.reserved) <= set(self._in_transfer) or not set(inst.held) <= handing_off:
                raise SimulationError(f"INV-11: instance {inst.index}: blocks reserved or held for a request not in a hand-off")
        if self.hedger is not None:
            places = self._check_hedges(places)
        if self.arrived != self.recorded + len(places):
            raise SimulationError(
                f"INV-1: requests not conserved: {self.arrived} arrived != {self.recorded} recorded + {len(places)} in flight"
            )
        return places

    def _check_hedges(self, places: dict[int, str]) -> dict[int, str]:
        """INV-22: once a copy of a hedged request has answered, every other copy is being cancelled (it
        leaves at its instance's next step boundary, or when its CPU load lands). Returns the places by
        request: copies in flight stand for their request until it is recorded."""
        cancelling = {r.request_id for inst in self.instances for r in inst.aborts}
        for inst in self.instances:
            cancelling |= inst.cancellation.abort_loads
        for rid in places:
            group = self.hedger.by_id.get(rid)
            if group is not None and group.winner >= 0 and group.copies[group.winner].request_id != rid:
                if rid not in cancelling:
                    raise SimulationError(f"INV-22: request {group.copies[0].request_id}: copy {rid} still served after another answered")
        return self.hedger.in_flight(places)

    def decision_table(self):
        """decisions.parquet's rows, with policy.trace_decisions; else None."""
        return decision_table(self.decisions) if self.trace else None


def decision_table(decisions: list[tuple]):
    """decisions.parquet: one row per routing decision (time, request, stage, chosen instance, scores)."""
    import pandas as pd

    cols = ["time_ms", "request_id", "stage", "instance", "score", "best_score", "regret", "scores"]
    if not decisions:
        return pd.DataFrame({c: [] for c in cols})
    data = list(zip(*decisions))
    frame = pd.DataFrame(dict(zip(cols, data)))
    frame["time_ms"] = frame["time_ms"] / 1000.0
    return frame


def warn_refusals(instances: list[Instance], arrived: int) -> None:
    """One warning line each for requests the engines refused as too long or dropped as never fitting,
    so a run that lost requests says why."""
    too_long = sum(inst.stats.too_long for inst in instances)
    if too_long:
        limits = sorted({inst.params.max_model_len for inst in instances if inst.params.max_model_len})
        warn_config(
            "cluster.engine.max_model_len",
            f"{too_long} of {arrived} requests have a prompt plus output longer than max_model_len "
            f"({', '.join(map(str, limits))} tokens) and were rejected, as vLLM rejects them",
        )
    dropped = sum(inst.stats.dropped for inst in instances)
    if dropped:
        tokens = sorted({inst.params.total_kv_blocks * inst.bs for inst in instances})
        warn_config(
            "cluster.engine.total_kv_blocks",
            f"{dropped} of {arrived} requests were dropped: they can never fit in an instance's KV cache "
            f"({', '.join(map(str, tokens))} tokens)",
        )

