"""The autoscaler: evaluates each autoscaled pool on its interval and applies what its scaler wants.

An evaluation (event priority PRIO_AUTOSCALE: after the cluster's events at the same instant, before the
instances' steps) asks the pool's scaler for a count, clamps it to [min, max] and stabilises a scale-down
as Kubernetes HPA does (the pool goes down only to the highest count wanted within the last ``cooldown_s``;
up at once). Scaling up starts the lowest-numbered replicas that are off: billed from now, serving after
the provisioning delay. Scaling down first cancels starts still provisioning (newest first), then drains
serving replicas: the one with the fewest outstanding requests, the newest among equals (it has the least
warm cache). A replica that leaves drops its caches and the router's prefix index forgets it, so one
started again later is cold, as a new one would be.

When the run has nothing left to do (the workload is exhausted and nothing is outstanding), the
autoscaler stops: draining replicas leave, and its pending evaluations and timers are dropped from the
loop so they do not prolong the run.

A pool of batching runtimes (distsim.runtime) scales the same way; what differs (its type's board, router
state and view; when a replica is idle; that it has no cache to empty) is its side (distsim.autoscale.sides).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from distsim.autoscale.probe import CompletionWatch, PoolProbe
from distsim.autoscale.replicas import DRAINING, OFF, PROVISIONING, SERVING, PoolReplicas, Replica
from distsim.autoscale.sides import LlmSide, Side
from distsim.errors import SimulationError
from distsim.events.loop import PRIO_AUTOSCALE
from distsim.events.rng import stream

if TYPE_CHECKING:
    from distsim.autoscale.base import Scaler
    from distsim.autoscale.host import LlmPool, ScalablePool, ScaledCluster
    from distsim.autoscale.settings import AutoscaleSettings
    from distsim.request import Request


@dataclass
class ScaledPool:
    spec: ScalablePool  # an LLM pool, or a batching runtime's
    scaler: Scaler
    replicas: PoolReplicas
    watch: CompletionWatch
    side: Side  # where its replicas live
    history: deque = field(default_factory=deque)  # (time_us, recommended count) within the cool-down
    ups: int = 0  # replicas started
    downs: int = 0  # replicas drained, or cancelled while provisioning

    @property
    def settings(self) -> AutoscaleSettings:
        return self.spec.autoscale  # never None: only autoscaled pools are scaled

    @property
    def asked(self) -> int:
        """Replicas asked for: serving plus provisioning."""
        return self.replicas.count(SERVING) + self.replicas.count(PROVISIONING)


class Autoscaler:
    """Scales ``cluster``'s autoscaled ``pools``. Each LLM pool's completion watch listens to the cluster's
    records (``ttft_slo_ms``: the default TTFT SLO, ``output_lag_us``: the front end's per-token lag, as the
    recorder has them); it stops when the cluster tells its ``drained_listeners`` the run is drained
    (:meth:`drained`, see attach_autoscaler) and the runtimes' front, if any, has nothing left either."""

    def __init__(self, cluster: ScaledCluster, pools: Sequence[LlmPool], seed: int = 0, *, ttft_slo_ms: float = 0.0, output_lag_us: int = 0):
        self.cluster, self.loop = cluster, cluster.loop
        self.units = len(cluster.instances)  # instances.parquet's rows: the cluster's, then any runtime replicas
        self.llm = LlmSide(cluster)
        self._activity: list[Callable[[], bool]] = [cluster.active]  # whether each side has anything left to do
        self.stopped = False
        self._checking: set[int] = set()  # engines (first of a replica) with a drain check pending
        self.pools: list[ScaledPool] = []
        first = 0
        for spec in pools:
            dp = spec.data_parallel_size
            if spec.autoscale is not None:
                engines = [tuple(range(first + k * dp, first + (k + 1) * dp)) for k in range(spec.built_count)]
                watch = CompletionWatch({e for group in engines for e in group}, ttft_slo_ms, output_lag_us)
                cluster.record_listeners.append(watch.heard)
                self.add(spec, engines, watch, self.llm, seed)
            first += spec.built_count * dp

    def add(
        self, spec: ScalablePool, engines: list[tuple[int, ...]], watch: CompletionWatch,
        side: Side, seed: int,
    ) -> ScaledPool:
        """An autoscaled pool of ``engines`` (global indices, replica by replica) on ``side``."""
        replicas = PoolReplicas(spec.name, engines, spec.count)
        scaler = spec.autoscale.cls(spec.autoscale.params, spec.count, stream(seed, f"autoscale/{spec.name}"))
        sp = ScaledPool(spec, scaler, replicas, watch, side)
        self.pools.append(sp)
        return sp

    def start(self, pools: list[ScaledPool] | None = None) -> None:
        """Initial membership, the first timeline rows, and the evaluations' events (of ``pools``; None: all)."""
        for sp in self.pools if pools is None else pools:
            self._update(sp, 0, sp.spec.count)
            loop = self.loop
            loop.schedule(sp.settings.interval_us, PRIO_AUTOSCALE, self._tick, sp)
            for at_us in sp.scaler.wake_times_us():
                loop.schedule(at_us, PRIO_AUTOSCALE, self._evaluate, sp)

    # ------------------------------------------------------------------ evaluations
    def _tick(self, now: int, sp: ScaledPool) -> None:
        for replica in sp.replicas.in_state(DRAINING):  # a fallback: every way out of an instance pokes
            self._check(now, (sp, replica))
        self._evaluate(now, sp)
        self.loop.schedule(now + sp.settings.interval_us, PRIO_AUTOSCALE, self._tick, sp)

    def _evaluate(self, now: int, sp: ScaledPool) -> None:
        s, r, side = sp.settings, sp.replicas, sp.side
        probe = PoolProbe(
            now, r.count(SERVING), r.count(PROVISIONING), r.count(DRAINING), sp.asked,
            np.asarray(side.local(r.serving_engines().tolist()), dtype=np.int64), sp.spec.data_parallel_size,
            side.board, side.state, sp.watch,
        )
        wanted = min(max(int(sp.scaler.desired(probe)), s.min_replicas), s.max_replicas)
        target = self._stabilised(sp, now, wanted)
        if target > sp.asked:
            self._scale_up(sp, target - sp.asked, now)
        elif target < sp.asked:
            self._scale_down(sp, sp.asked - target, now)
        self._update(sp, now, wanted)

    def _stabilised(self, sp: ScaledPool, now: int, wanted: int) -> int:
        """HPA's scale-down stabilisation: up at once; down only to the highest count wanted within the
        cool-down window (this evaluation's included)."""
        history = sp.history
        history.append((now, wanted))
        while history[0][0] < now - sp.settings.cooldown_us:
            history.popleft()
        if wanted >= sp.asked:
            return wanted
        return min(sp.asked, max(n for _, n in history))

    # ------------------------------------------------------------------ changes
    def _scale_up(self, sp: ScaledPool, n: int, now: int) -> None:
        for replica in sp.replicas.in_state(OFF)[:n]:
            sp.ups += 1
            sp.replicas.bill(replica, now, PROVISIONING)
            if sp.settings.provision_us == 0:
                sp.replicas.set_state(replica, SERVING)
            else:
                self.loop.schedule(now + sp.settings.provision_us, PRIO_AUTOSCALE, self._ready, (sp, replica, replica.tag))

    def _ready(self, now: int, item: tuple[ScaledPool, Replica, int]) -> None:
        sp, replica, tag = item
        if replica.tag == tag:  # not cancelled since
            sp.replicas.set_state(replica, SERVING)
            self._update(sp, now)

    def _scale_down(self, sp: ScaledPool, n: int, now: int) -> None:
        sp.downs += n
        starting = sorted(sp.replicas.in_state(PROVISIONING), key=lambda r: -r.order)
        for replica in starting[:n]:
            sp.replicas.release(replica, now)
        n -= min(n, len(starting))
        side = sp.side
        outstanding = side.state.outstanding
        serving = sorted(sp.replicas.in_state(SERVING), key=lambda r: (int(outstanding[side.local(r.engines)].sum()), -r.order))
        for replica in serving[:n]:
            sp.replicas.set_state(replica, DRAINING)
            for e in replica.engines:
                side.drain(e, lambda sp=sp, replica=replica: self._poke(sp, replica))
            self._check(now, (sp, replica))

    def _poke(self, sp: ScaledPool, replica: Replica) -> None:
        """Something left a draining engine: check the replica once this event is over."""
        if replica.engines[0] not in self._checking:
            self._checking.add(replica.engines[0])
            self.loop.schedule(self.loop.now, PRIO_AUTOSCALE, self._check, (sp, replica))

    def _check(self, now: int, item: tuple[ScaledPool, Replica]) -> None:
        sp, replica = item
        self._checking.discard(replica.engines[0])
        if replica.state == DRAINING and all(sp.side.idle(e) for e in replica.engines):
            self._leave(sp, replica, now)

    def _leave(self, sp: ScaledPool, replica: Replica, now: int) -> None:
        """The drained replica leaves: billing stops, its caches go (a later start is cold)."""
        sp.replicas.release(replica, now)
        for e in replica.engines:
            sp.side.leave(e)
        self._update(sp, now)

    def _update(self, sp: ScaledPool, now: int, wanted: int | None = None) -> None:
        """After a change: the routers' candidates, and a timeline row."""
        sp.side.update(sp.replicas.replicas)
        sp.replicas.record(now, sp.asked if wanted is None else wanted)

    # ------------------------------------------------------------------ the end
    def also_active(self, active: Callable[[], bool]) -> None:
        """The run goes on while ``active()`` too (the runtimes' front beside the cluster)."""
        self._activity.append(active)

    def active(self) -> bool:
        """Whether the run has anything left to do."""
        return any(active() for active in self._activity)

    def drained(self) -> None:
        """The cluster's "run drained" listener (distsim.cluster.cluster.Cluster.drained_listeners): stop
        unless another side (the runtimes' front) still has work."""
        self.request_recorded(None)

    def request_recorded(self, req: Request | None) -> None:
        """A record listener of the runtimes' front (their requests' final status). Once nothing is left to
        do, stop (see the module doc), in an event of its own at this instant, so no instance is in the
        middle of its own event when its replica leaves."""
        if self.stopped or self.active():
            return
        self.stopped = True
        self.loop.schedule(self.loop.now, PRIO_AUTOSCALE, self._stop)

    def _stop(self, now: int, _: object) -> None:
        for sp in self.pools:
            for replica in sp.replicas.in_state(DRAINING):
                self._check(now, (sp, replica))
        self.loop.drop(self)

    def check_invariants(self) -> None:
        """INV-19: only serving replicas are candidates; INV-20: a replica that is off holds no request
        (one provisioning cannot have been sent any). Raises SimulationError (the tests call it per event)."""
        for sp in self.pools:
            members = sp.side.candidates()
            for replica in sp.replicas.replicas:
                for e in replica.engines:
                    if (e in members) != (replica.state == SERVING):
                        raise SimulationError(f"INV-19: instance {e} ({replica.state}) is a candidate: {e in members}")
                    if replica.state in (OFF, PROVISIONING) and not sp.side.idle(e):
                        raise SimulationError(f"INV-20: instance {e} is {replica.state} but holds requests")

    def billed_s(self, start_us: int, end_us: int) -> np.ndarray:
        """Seconds each instance was billed within the run's span: the whole span for a fixed pool's."""
        billed = np.full(self.units, (end_us - start_us) / 1e6)
        for sp in self.pools:
            for e, us in sp.replicas.billed_us(start_us, end_us).items():
                billed[e] = us / 1e6
        return billed


def attach_autoscaler(
    cluster: ScaledCluster, pools: Sequence[LlmPool], seed: int = 0, *, ttft_slo_ms: float = 0.0, output_lag_us: int = 0
) -> Autoscaler:
    """Autoscale ``cluster``'s autoscaled pools (built with ``max`` replicas each): from now only their
    initial ``count`` serve. Each pool's scaler gets its own random stream, "autoscale/<pool>". The
    autoscaler listens to the cluster's "run drained" event and is ``cluster.autoscaler``."""
    autoscaler = Autoscaler(cluster, pools, seed, ttft_slo_ms=ttft_slo_ms, output_lag_us=output_lag_us)
    cluster.drained_listeners.append(autoscaler.drained)
    cluster.autoscaler = autoscaler
    autoscaler.start()
    return autoscaler
