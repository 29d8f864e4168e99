"""Closed-loop clients (``workload.clients``): N users, each sending its next request when its previous
reply is in, plus a think time; concurrency in stages, new clients ramped in.

Why a driven source: a closed loop's arrival times depend on the run (a reply's time), so no fixed stream
can hold them. The requests' contents (lengths, tenants, prefix keys, a trace's rows) still come from the
configured open-loop source, in its order: a send takes the next request of that stream, so a trace
replayed closed-loop keeps its order and lengths. Only its arrival time changes: in ``closed`` mode a free
client sends at once; in ``mixed`` mode not before the request's own arrival time (the arrival process or
the trace's times are a rate limit, as ``vllm bench serve --request-rate R --max-concurrency N``).

Determinism: every send, reply and stage change is an event at PRIO_ARRIVAL, ordered by (time, priority,
sequence); clients ready at one instant send in the order they became ready (the initial clients in
client order), and request ids are given in send order, so ids stay in arrival order. Think times come
from their own stream ("workload/clients"), drawn in reply order.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from distsim.errors import ConfigError, SimulationError
from distsim.events.rng import stream
from distsim.request import Request
from distsim.workload import checks
from distsim.workload.base import ArrivalSink, DrivenSource, WorkloadSource
from distsim.workload.driven import Driver
from distsim.workload.lengths import Buffered, Sampler
from distsim.workload.schema import ClientsConfig

MODES = ("closed", "mixed")


@dataclass(frozen=True)
class Stage:
    """``clients`` concurrent clients from ``start_us`` on (a stage's end is the next one's start)."""

    start_us: int
    clients: int


@dataclass(frozen=True)
class ClientSettings:
    """``workload.clients``, checked. ``stages``: the concurrency over time (one stage without an end when
    only ``count`` is set); ``end_us``: when the last stage ends (None: never; the source's requests or
    workload.duration_s end the run)."""

    stages: tuple[Stage, ...]
    end_us: int | None
    mode: str
    ramp_us: int
    think: Sampler | None

    @property
    def max_clients(self) -> int:
        return max(s.clients for s in self.stages)


def client_settings(cfg, key: str = "workload.clients") -> ClientSettings | None:
    """The checked settings, or None when both ``count`` and ``stages`` are null (open loop)."""
    if cfg.count is None and not cfg.stages:
        return None
    if cfg.count is not None and cfg.stages:
        raise ConfigError(f"{key}.stages", "set either count or stages, not both")
    mode = checks.choice(f"{key}.mode", cfg.mode, MODES)
    ramp_us = round(checks.non_negative(f"{key}.ramp_s", cfg.ramp_s) * 1_000_000)
    think_cfg = cfg.think_time_s
    think = Sampler(think_cfg, f"{key}.think_time_s", integer=False, default=ClientsConfig().think_time_s)
    if think_cfg.dist == "fixed" and think_cfg.value == 0 and think_cfg.min is None:
        think = None  # no pause: nothing to draw
    if cfg.count is not None:
        stages = (Stage(0, checks.integer(f"{key}.count", cfg.count, low=1)),)
        return ClientSettings(stages, None, mode, ramp_us, think)
    start, out = 0, []
    for i, stage in enumerate(cfg.stages):
        n = checks.integer(f"{key}.stages[{i}].clients", stage.clients, low=0)
        d = round(checks.positive(f"{key}.stages[{i}].duration_s", stage.duration_s) * 1_000_000)
        out.append(Stage(start, n))
        start += d
    if not any(s.clients for s in out):
        raise ConfigError(f"{key}.stages", "every stage has 0 clients: nothing would be sent")
    return ClientSettings(tuple(out), start, mode, ramp_us, think)


class ClosedLoopSource(DrivenSource):
    """Requests of ``inner`` (in its order) sent by closed-loop clients. ``client_of`` (after the run): the
    client that sent each request, by request id. A client has at most one request out: a second send
    while one is out is a SimulationError."""

    feature = "clients"

    def __init__(self, inner: WorkloadSource | list[Request], settings: ClientSettings, seed: int,
                 duration_us: int | None = None):
        self.inner = inner
        self.settings = settings
        self.seed = seed
        self.limit = inner.limit if isinstance(inner, WorkloadSource) else len(inner)
        ends = [t for t in (duration_us, settings.end_us) if t is not None]
        self.stop_us = min(ends) if ends else None  # no send at or after this instant
        self.duration_us = self.stop_us
        self.reply_lag_us = 0  # the front end's per-request output lag (set by the feature before the run)
        self.client_of = array("q")

    def describe(self) -> dict:
        inner = self.inner.describe() if isinstance(self.inner, WorkloadSource) else {}
        return {**inner, "clients": self.settings.max_clients, "mode": self.settings.mode}

    def summary(self) -> dict | None:
        return self.inner.summary() if isinstance(self.inner, WorkloadSource) else None

    def drive(self, sink: ArrivalSink) -> None:
        _Loop(self, sink).start()


class _Loop(Driver):
    """One run's clients: who is busy (a request out, or thinking), the stage's target, the sends."""

    def __init__(self, source: ClosedLoopSource, sink: ArrivalSink):
        super().__init__(sink, source.reply_lag_us)
        self.src = source
        settings = source.settings
        self.settings = settings
        self.requests: Iterator[Request] = iter(source.inner)
        self.think = None if settings.think is None else Buffered(settings.think, stream(source.seed, "workload/clients"))
        n = settings.max_clients
        self.busy = [False] * n  # a request out, thinking, or about to send
        self.out = [False] * n  # a request out
        self.target = 0  # clients 0 .. target-1 may send

    def start(self) -> None:
        for stage in self.settings.stages:
            self.at(stage.start_us, self._stage, stage.clients)
        if self.src.stop_us is not None:
            self.at(self.src.stop_us, self._stop)

    def _stage(self, now: int, clients: int) -> None:
        """A stage begins: clients above its count retire after their reply; idle ones below it start,
        spread over the ramp."""
        if self.ended:
            return
        old, self.target = self.target, clients
        new = [c for c in range(old, clients) if not self.busy[c]] if clients > old else []
        for j, c in enumerate(new):
            self.busy[c] = True
            self.at(now + self.settings.ramp_us * j // len(new), self._ready, c)
        self._end_if_idle()

    def _stop(self, now: int, _=None) -> None:
        self.end()

    def _ready(self, now: int, c: int) -> None:
        """Client ``c`` may send: it takes the stream's next request (retiring instead if its stage let it go)."""
        if self.ended or c >= self.target:
            self.busy[c] = False
            self._end_if_idle()
            return
        req = next(self.requests, None)
        if req is None:
            self.busy[c] = False
            self.end()
            return
        if self.settings.mode == "mixed" and req.arrival_us > now:
            self.at(req.arrival_us, self._send, (c, req))
        else:
            self._send(now, (c, req))

    def _send(self, now: int, item: tuple[int, Request]) -> None:
        c, req = item
        if self.out[c]:
            raise SimulationError(f"INV-29: closed-loop client {c} sends a request while one is out")
        self.out[c] = True
        self.src.client_of.append(c)
        self.send(now, req, c)

    def replied(self, c: int, req: Request, at_us: int) -> None:
        """A request's final status reached its client (completed, refused or dropped): after a think time
        the client is ready again."""
        self.out[c] = False
        if self.think is not None:
            at_us += round(self.think.next() * 1_000_000)
        self.at(at_us, self._ready, c)

    def _end_if_idle(self) -> None:
        if self.target == 0 and not any(self.busy) and self.settings.stages[-1].start_us <= self.loop.now:
            self.end()


def closed_loop(source: WorkloadSource, cfg, seed: int) -> ClosedLoopSource:
    """``source``'s requests sent by the clients ``cfg.clients`` describes. In closed mode the source's
    arrival times are not used, so its own time limit is lifted and workload.duration_s stops the sends
    instead; in mixed mode the source's times (cut at duration_s) stay the earliest send times."""
    settings = client_settings(cfg.clients)
    if cfg.get("mix") is not None:
        raise ConfigError("workload.clients", "closed-loop clients serve LLM requests only: unset workload.mix")
    if cfg.sessions.enabled:
        raise ConfigError("workload.clients", "sessions already send their own turns: unset workload.sessions.enabled")
    duration_us = None
    if settings.mode == "closed":
        duration_us, source.duration_us = source.duration_us, None
    return ClosedLoopSource(source, settings, seed, duration_us)
