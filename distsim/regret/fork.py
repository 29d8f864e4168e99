"""Fork the deterministic simulation at a routing decision and replay it on every alternative instance.

The replay runs the scenario again, in this process, with a router that is the configured one plus a
hook: its own choice is made exactly as in the run (the same scores, the same draws from its stream), and
for each sampled request the process forks (``os.fork``: a copy-on-write copy of the whole world at that
instant, no pickling) once per candidate instance. Each child sends the request to its candidate instead and
lets the simulation go on for the horizon: later decisions made by the policy itself, reacting to the changed
one, or (pinned) each as the run made it, so that only the sampled decision differs; then it reports what it
saw. The parent keeps the policy's own choice and goes on to the next sampled decision. The simulation is
deterministic, so the parent's run is the original run, and the child that replays the policy's own choice
reproduces it (a test checks both).

What a child reports (an :class:`Outcome`), at ``stop`` = decision + horizon (or the run's own horizon):
the sampled request's TTFT and E2E as the client sees them (the front end's output lag included, as in
requests.parquet), each a lower bound flagged ``censored`` when it had not happened by ``stop``; and the
window's total latency: the request-microseconds spent in the cluster by every request between the decision
and ``stop`` (the integral of requests in the system over the window, so the decision's cost to the others
counts too).

POSIX only (os.fork). A replay needs a single cluster (no cells, no batching-runtime pools).
"""

from __future__ import annotations

import os
import pickle
import signal
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from distsim.errors import SimulationError
from distsim.events.loop import EventLoop
from distsim.metrics.recorder import Recorder
from distsim.policies.base import Route
from distsim.request import Request, Status
from distsim.world import build

if TYPE_CHECKING:
    from distsim.cluster.cluster import Cluster
    from distsim.policies.base import Router
    from distsim.resolve import Scenario
    from distsim.signals.view import ClusterView

PRIO_LAST = 1 << 60  # the replay's end runs after every other event of its instant
COMPLETED, UNFINISHED = int(Status.COMPLETED), int(Status.UNFINISHED)


@dataclass(frozen=True)
class Outcome:
    """What one replay saw (microseconds)."""

    ttft_us: int
    e2e_us: int
    ttft_censored: bool
    e2e_censored: bool
    window_us: int  # request-microseconds in the cluster, over all requests, from the decision to the stop


@dataclass(frozen=True)
class Decision:
    """A sampled routing decision: the policy's own choice and every candidate's replay, by view position."""

    request_id: int
    time_us: int
    stop_us: int
    members: tuple[int, ...]  # the candidates' instance numbers
    chosen: int  # the position the policy chose
    outcomes: tuple[Outcome, ...]


class _Done(Exception):
    """The replay reached its stop (a child), or the last sampled decision was replayed (the parent)."""


class Forks:
    """The sampled decisions and the forking; the router's hook calls :meth:`decide`."""

    def __init__(self, sampled: set[int], horizon_us: int, pinned: dict[int, tuple[int, ...]] | None = None):
        self.pending = set(sampled)
        self.horizon_us = horizon_us
        # request id -> the instances the run sent it to (under P/D its prefill and decode instances, the
        # prefill one -1 where the P/D decider kept it local): later decisions in a replay
        self.pinned = pinned
        self.decisions: list[Decision] = []
        self.child: tuple[int, Request, int, int] | None = None  # in a child: (pipe, request, decision, stop)
        self.loop: EventLoop | None = None
        self.world: Cluster | None = None
        self.recorder: Recorder | None = None

    def decide(self, req: Request, view: ClusterView, local: int) -> int:
        """The position the request goes to: the policy's own ``local``, or in a child its alternative."""
        if self.child is not None:
            return self._pin(req, view, local)
        if req.request_id not in self.pending:
            return local
        self.pending.discard(req.request_id)
        now = view.now
        stop = now + self.horizon_us
        if self.loop.horizon_us is not None:
            stop = min(stop, self.loop.horizon_us)
        outcomes = []
        for alt in range(view.n):
            outcome = self._fork(req, now, stop)
            if outcome is None:  # this is the child that replays ``alt``
                return alt
            outcomes.append(outcome)
        members = tuple(int(m) for m in view.members)
        self.decisions.append(Decision(req.request_id, now, stop, members, local, tuple(outcomes)))
        if not self.pending:
            raise _Done  # nothing left to replay: the parent's run may stop here
        return local

    def _pin(self, req: Request, view: ClusterView, local: int) -> int:
        """In a replay, a later decision: the run's own (pinned: the instance of the run's that is a candidate
        of this decision, so each P/D stage keeps its own), or the policy's."""
        if req is self.child[1] or self.pinned is None:
            return local
        for target in self.pinned.get(req.request_id, ()):
            where = np.flatnonzero(view.members == target)
            if where.size:
                return int(where[0])
        return local

    def _fork(self, req: Request, now: int, stop: int) -> Outcome | None:
        """In the parent, the child's outcome; in the child, None (it goes on simulating)."""
        rfd, wfd = os.pipe()
        # Ctrl-C waits until the child knows it is one: else it would unwind the parent's handlers (and
        # print the parent's message) instead of reporting to the parent and exiting
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                self.child = (wfd, req, now, stop)
                self.loop.schedule(stop, PRIO_LAST, _stop)
                return None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(wfd)
        try:
            with os.fdopen(rfd, "rb") as pipe:
                data = pipe.read()
        except BaseException:  # Ctrl-C (or any error) in the parent: the replay is not wanted any more
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        _, status = os.waitpid(pid, 0)
        result = pickle.loads(data) if data else f"the replay exited with status {os.waitstatus_to_exitcode(status)}"
        if not isinstance(result, Outcome):
            raise SimulationError(f"the replay of request {req.request_id} failed: {result}")
        return result

    def report(self, error: BaseException | None) -> None:
        """In a child, at its stop (or on an error): send the outcome to the parent and exit. Never returns."""
        wfd, req, decided, stop = self.child
        code = 0
        try:
            if error is not None:
                raise error
            self.world.finish(stop)
            message: object = outcome(req, self.recorder, decided, stop)
        except BaseException as err:  # anything: the parent reports it
            message, code = f"{type(err).__name__}: {err}", 1
        try:
            with os.fdopen(wfd, "wb") as pipe:
                pipe.write(pickle.dumps(message))
        finally:
            os._exit(code)


def _stop(now: int, arg: object) -> None:
    raise _Done


def outcome(req: Request, recorder: Recorder, decided: int, stop: int) -> Outcome:
    """The request's TTFT and E2E (censored at ``stop``) and the window's total latency, from the records."""
    lag = recorder.output_lag_us
    arrival = req.arrival_us
    ttft_censored = req.first_token_us < 0
    e2e_censored = req.status != Status.COMPLETED
    ttft = stop - arrival if ttft_censored else req.first_token_us + lag - arrival
    e2e = stop - arrival if e2e_censored else req.completion_us + lag - arrival
    window = 0
    for record in recorder.records:
        start, status, completion = record[4], record[5], record[13]
        if status == COMPLETED:
            end = completion + lag
        elif status == UNFINISHED:
            end = stop
        else:  # rejected or dropped: it left when it arrived
            end = start
        window += max(0, min(end, stop) - max(start, decided))
    return Outcome(ttft, e2e, ttft_censored, e2e_censored, window)


def forking(base: type[Router], forks: Forks) -> type[Router]:
    """The configured router class with the fork hook on its decisions."""

    class Forking(base):  # type: ignore[misc, valid-type]
        def route(self, req, view):
            choice = super().route(req, view)
            if choice.__class__ is Route:  # the position may be forked; the priority is the policy's
                return Route(forks.decide(req, view, choice.target), choice.priority)
            return forks.decide(req, view, choice)

    Forking.__name__ = Forking.__qualname__ = f"Forking{base.__name__}"
    return Forking


def fresh(req: Request) -> Request:
    """A new request with ``req``'s workload fields (a given list of requests was used by the run)."""
    return Request(
        req.request_id, req.arrival_us, req.prompt_tokens, req.output_tokens, req.tenant, req.slo_class,
        req.session_id, req.block_hashes, req.ttft_slo_ms, req.tpot_slo_ms, req.priority,
    )  # fmt: skip


def replay(
    scenario: Scenario, sampled: set[int], horizon_us: int, pinned: dict[int, tuple[int, ...]] | None = None
) -> list[Decision]:
    """Run ``scenario`` again, forking at each sampled request's first routing decision (see the module
    docstring; under P/D the prefill pick, or with the P/D decider the decode pick, which is routed first);
    ``pinned``: the run's own choices (request id -> its instances), which later decisions in a replay keep."""
    forks = Forks(sampled, horizon_us, pinned)
    routing = scenario.policy.routing
    policy = replace(scenario.policy, routing=replace(routing, cls=forking(routing.cls, forks)))
    sim = scenario.sim
    loop = EventLoop(sim.horizon_us)
    parts = build(replace(scenario, policy=policy), loop, only=("autoscale", "cells"))  # no run-level features
    world, recorder = parts.world, parts.recorder
    forks.loop, forks.world, forks.recorder = loop, world, recorder
    workload = scenario.workload
    world.feed(map(fresh, workload) if isinstance(workload, (list, tuple)) else workload)
    error: BaseException | None = None
    try:
        loop.run()
    except _Done:
        pass
    except BaseException as err:  # in the parent, raised as it is; a child reports it
        if forks.child is None:
            raise
        error = err
    if forks.child is not None:
        forks.report(error)
    return forks.decisions
