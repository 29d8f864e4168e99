"""Capacity: the highest arrival rate at which a set share of requests meets both SLOs (DistServe's goodput).

Why: goodput at a fixed offered load below saturation is that load once every request meets its SLO, so
it cannot tell two good policies apart; capacity asks how far each one can be pushed. ``fitness.kind:
capacity`` runs the configured scenario as usual (its latency figures, at the configured load, stay in
summary.json) and then searches the rate:

- **Common random numbers.** The workload is drawn once; every trial replays the same requests (lengths,
  prefixes, sessions, bursts) with arrival times divided by the trial's factor s, so the offered rate is
  s x the configured one and only the load differs between trials. The horizon and the measurement
  window scale with the arrivals.
- **Bracket.** The configured load (factor 1) is the first trial. If it meets the share, the load doubles
  while it still meets, up to the fleet's roofline rate (:func:`roofline_rps`): a finite run that meets the
  share there is a burst too short to tell, and the search stops (``at_roofline``). If the configured load
  misses, the load halves until it meets.
- **Bisection** on log(rate) until hi / lo <= 1 + ``tolerance``, or ``max_steps`` trials in all. The
  capacity is the highest rate seen to meet the share (``lo``): a trial never reports a rate it did not run.
- **Early stop** (``stop_early``): a trial stops once so many of its measured requests have missed that
  the share is out of reach (:class:`MissCount`). Only a failing trial stops, and only once its failure is
  certain, so the rates tried, the capacity and the attainment reported (a passing trial's, run to its end)
  are those of trials run to their end; the failing trials' tails are what it saves.

A request that admission shed from an SLO class whose SLO allows shedding (``sheddable``) is not a miss
(distsim.metrics.shedding); every other shed, dropped or late request is.

The fitness is that rate per GPU (``per: gpu``, the base run's mean GPUs), per dollar per hour, or raw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.instance.latency.base import StepShape
from distsim.metrics.shedding import shed_allowed
from distsim.metrics.summary import rnd
from distsim.probe import RunProbe
from distsim.request import Request

if TYPE_CHECKING:
    from distsim.events.loop import EventLoop
    from distsim.metrics.recorder import Recorder
    from distsim.metrics.tables import RunWorld

# ``scenario`` below is a resolved scenario (distsim.resolve.Scenario, a layer above this one: typed loosely)
Scenario = Any

_FIELDS = ("request_id", "arrival_us", "prompt_tokens", "output_tokens", "tenant", "slo_class", "session_id",
           "block_hashes", "ttft_slo_ms", "tpot_slo_ms", "priority")  # fmt: skip


@dataclass(frozen=True)
class Trial:
    """One run of the scenario with arrivals sped up by ``factor``: its rate and SLO attainment."""

    factor: float
    rps: float
    attainment: float

    def meets(self, share: float) -> bool:
        return self.attainment >= share


class TrialFailed(Exception):
    """Raised inside a trial's event loop once it cannot meet the share; the run is abandoned."""


class MissCount(RunProbe):
    """Counts a trial's measured requests that are sure to miss an SLO, and stops the run
    (:class:`TrialFailed`) once the share is out of reach: with m sure misses among at most n measured
    requests, the attainment is at most (n - m) / n, so once that rounds below the share (as summary.json's
    attainment is rounded) no later request can lift it back. n counts the requests arriving in the
    measurement window by the horizon, an upper bound on those measured, which keeps the bound safe.

    A miss is sure when a request's final status is recorded without meeting both SLOs
    (Recorder.met_slo), or, before that, when its TTFT SLO has passed with no first token yet: that token
    comes at the current time or later. Each time a request is recorded, the requests whose TTFT deadline
    has passed are looked at once, in deadline order. Not with hedging, whose copies carry the first token
    on other objects."""

    def __init__(self, scenario: Scenario, requests: list[Request], share: float):
        window, horizon = scenario.sim.window, scenario.sim.horizon_us
        self.start_us = window.start_us if window is not None else 0
        self.first_request = window.first_request if window is not None else 0  # sim.warmup_requests
        end = window.end_us if window is not None else None
        if horizon is not None:
            end = horizon + 1 if end is None else min(end, horizon + 1)
        self.end_us = end
        self.requests = [r for r in requests if self._measured(r)]
        self.n = len(self.requests)
        self.share = share
        self.watch_ttft = not scenario.policy.hedge.enabled
        self.sheddable = scenario.slo.sheddable  # their classes' shed requests are no misses (distsim.metrics.shedding)
        self.missed: set[int] = set()  # request ids
        self.by_deadline: list[tuple[float, Request]] = []
        self.next = 0  # the first request in by_deadline not looked at yet
        self.recorder: Recorder | None = None
        self.loop: EventLoop | None = None

    def _measured(self, req: Request) -> bool:
        arrival_us = req.arrival_us
        return (req.request_id >= self.first_request and arrival_us >= self.start_us
                and (self.end_us is None or arrival_us < self.end_us))

    def built(self, world: RunWorld, loop: EventLoop, recorder: Recorder) -> None:
        self.recorder, self.loop = recorder, loop
        if self.watch_ttft:
            self.by_deadline = sorted(((self._ttft_slo(r), r) for r in self.requests),
                                      key=lambda e: e[1].arrival_us - recorder.output_lag_us + e[0] * 1000.0)  # fmt: skip
        world.record_listeners.append(self.heard)

    def _ttft_slo(self, req: Request) -> float:
        return self.recorder.default_ttft_slo_ms if req.ttft_slo_ms is None else req.ttft_slo_ms

    def bound(self) -> float:
        """The highest attainment the trial can still reach, rounded as summary.json rounds it."""
        return rnd((self.n - len(self.missed)) / self.n) if self.n else 0.0

    def heard(self, req: Request) -> None:
        if not self.recorder.met_slo(req) and self._measured(req) and not shed_allowed(req, self.sheddable):
            self.missed.add(req.request_id)
        self._overdue(self.loop.now)
        if self.bound() < self.share:
            raise TrialFailed

    def _overdue(self, now: int) -> None:
        """Count the requests past their TTFT SLO with no first token: it comes at ``now`` or later, so their
        TTFT as the client sees it is at least (now + lag - arrival) / 1000 ms (the recorder's arithmetic)."""
        lag, entries = self.recorder.output_lag_us, self.by_deadline
        while self.next < len(entries):
            slo, req = entries[self.next]
            if not (now + lag - req.arrival_us) / 1000.0 > slo:
                return
            if req.first_token_us < 0 and not shed_allowed(req, self.sheddable):  # shed at arrival: allowed
                self.missed.add(req.request_id)
            self.next += 1


def materialise(scenario: Scenario) -> list[Request]:
    """The scenario's requests, drawn once (a restartable source), for every trial to copy."""
    requests = list(scenario.workload)
    if any(r.rtype != "llm" for r in requests):
        raise ConfigError("fitness.kind", "capacity needs an LLM-only workload (workload.mix has other request types)")
    if len(requests) < 2 or requests[-1].arrival_us <= requests[0].arrival_us:
        raise ConfigError("fitness.kind", "capacity needs at least two requests arriving at different times")
    return requests


def offered_rps(requests: list[Request]) -> float:
    """The configured load: arrivals per second between the first and the last (n - 1 gaps)."""
    return (len(requests) - 1) * 1e6 / (requests[-1].arrival_us - requests[0].arrival_us)


def scaled(requests: list[Request], factor: float) -> list[Request]:
    """Fresh copies of ``requests`` (workload fields only) with arrival times divided by ``factor``."""
    out = []
    for r in requests:
        values = [getattr(r, f) for f in _FIELDS]
        values[1] = int(math.floor(r.arrival_us / factor + 0.5))
        out.append(Request(*values))
    return out


def _scale_us(t: int | None, factor: float) -> int | None:
    return None if t is None else int(math.floor(t / factor + 0.5))


def trial_scenario(scenario: Scenario, requests: list[Request], factor: float) -> Scenario:
    """The scenario at ``factor`` x its load: the same requests sooner, the horizon and window with them,
    no timeline, and plain goodput as its fitness (a trial's own number is its attainment)."""
    from distsim.metrics.settings import FitnessSettings

    sim = scenario.sim
    window = sim.window
    if window is not None:
        window = replace(window, start_us=_scale_us(window.start_us, factor), end_us=_scale_us(window.end_us, factor))
    sim = replace(sim, horizon_us=_scale_us(sim.horizon_us, factor), window=window, timeline=None)
    return replace(scenario, workload=scaled(requests, factor), sim=sim, fitness=FitnessSettings())


def roofline_rps(scenario: Scenario, requests: list[Request]) -> float:
    """The fleet's roofline rate from its step models, the bracket's first guess (the bisection checks it):
    each instance decodes ``max_num_seqs`` sequences a step at the shortest context and prefills at its
    full token budget, a request costing its output tokens after the first at the first rate plus the prompt tokens no
    shared prefix could cache at the second. Optimistic: no queueing, no memory limit, no idle step."""
    n = len(requests)
    mean_out = sum(max(r.output_tokens - 1, 0) for r in requests) / n  # the prefill step emits the first
    mean_new = sum(max(r.prompt_tokens - _shareable(r, scenario), 0) for r in requests) / n
    rps = {"mixed": 0.0, "prefill": 0.0, "decode": 0.0}
    for pool in scenario.pools:
        b, t = pool.engine.max_num_seqs, pool.engine.max_num_batched_tokens
        decode_us = max(pool.latency.step_us(StepShape(0, 0, 0, b, b)), 1) / b if pool.role != "prefill" else 0.0
        prefill_us = max(pool.latency.step_us(StepShape(t, t * (t + 1) // 2, t, 0, 0, 1)), 1) / t
        prefill_us = prefill_us if pool.role != "decode" else 0.0
        per_request_us = mean_out * decode_us + mean_new * prefill_us
        if per_request_us > 0:
            rps[pool.role] += pool.built_count * pool.data_parallel_size * 1e6 / per_request_us
    return rps["mixed"] or min(rps["prefill"], rps["decode"])  # P/D: the slower stage


def _shareable(r: Request, scenario: Scenario) -> int:
    """Prompt tokens a prefix cache could hold for ``r``: its full blocks that carry a shared key."""
    return len(r.block_hashes) * scenario.pools[0].engine.block_size if r.block_hashes is not None else 0


@dataclass(frozen=True)
class CapacitySearch:
    """Bracket and bisect the rate factor; ``trial(factor)`` runs the scenario at that factor."""

    share: float
    tolerance: float
    max_steps: int

    def run(self, trial: Callable[[float], Trial], base: Trial, roofline_factor: float) -> tuple[Trial | None, Trial | None, int]:
        """(the highest trial meeting the share, the lowest above it failing, trials run besides the base)."""
        lo, hi = (base, None) if base.meets(self.share) else (None, base)
        runs = 0
        while runs < self.max_steps and (lo is None or hi is None or hi.factor / lo.factor > 1 + self.tolerance):
            if hi is None:  # double, up to the roofline: a run that meets the share there is too short to tell
                if lo.factor >= roofline_factor:
                    break
                factor = min(2 * lo.factor, roofline_factor)
            elif lo is None:
                factor = hi.factor / 2
            else:
                factor = math.sqrt(lo.factor * hi.factor)
            t = trial(factor)
            runs += 1
            if t.meets(self.share):
                lo = t
            else:
                hi = t
        return lo, hi, runs


RunTrial = Callable[[Scenario, RunProbe | None], dict[str, Any]]


def capacity(scenario: Scenario, base_summary: dict[str, Any], run_trial: RunTrial) -> dict[str, Any]:
    """summary.json's ``capacity`` section: the rate found, its bracket and what it cost. ``run_trial``
    simulates a scenario with a probe (or None) and returns its summary (distsim.simulate.run's)."""
    cfg = scenario.fitness
    requests = materialise(scenario)
    rate0 = offered_rps(requests)
    if base_summary["goodput"]["slo_attainment"] is None:  # the window scales with the arrivals: no trial could
        return not_measured(cfg.share, rate0, roofline_rps(scenario, requests))
    stopped = 0

    def attainment(summary: dict[str, Any]) -> float:  # a shed request of a sheddable class is no miss
        section = summary["sheddable"] if "sheddable" in summary else summary["goodput"]
        return section["slo_attainment"] or 0.0

    def trial(factor: float) -> Trial:
        nonlocal stopped
        at = trial_scenario(scenario, requests, factor)
        probe = MissCount(at, at.workload, cfg.share) if cfg.stop_early else None
        try:
            return Trial(factor, factor * rate0, attainment(run_trial(at, probe)))
        except TrialFailed:
            stopped += 1
            return Trial(factor, factor * rate0, probe.bound())

    base = Trial(1.0, rate0, attainment(base_summary))
    roof = roofline_rps(scenario, requests)
    roof_factor = roof / rate0
    lo, hi, runs = CapacitySearch(cfg.share, cfg.tolerance, cfg.max_steps).run(trial, base, roof_factor)
    rps = lo.rps if lo is not None else 0.0
    return {
        "requests_per_s": rnd(rps),
        "share": cfg.share,
        "attainment_at_capacity": rnd(lo.attainment) if lo is not None else None,
        "bracket_rps": [rnd(rps), rnd(hi.rps) if hi is not None else None],
        "converged": lo is not None and hi is not None and hi.factor / lo.factor <= 1 + cfg.tolerance,
        "at_roofline": lo is not None and hi is None and lo.factor >= roof_factor,
        "offered_rps": rnd(rate0),
        "roofline_rps": rnd(roof),
        "runs": runs + 1,
        "stopped_early": stopped,
    }


NOT_MEASURED = "no request arrived in the measurement window (sim.warmup_s, sim.measure_s), at any load"


def not_measured(share: float, rate0: float, roof: float) -> dict[str, Any]:
    """The ``capacity`` section of a run that measured no request: the window scales with each trial's
    arrivals, so no trial would measure one either. The capacity is null with the reason, never 0.0 (a
    rate nothing was measured at), and no trial runs."""
    return {
        "requests_per_s": None, "share": share, "attainment_at_capacity": None, "bracket_rps": [None, None],
        "converged": False, "at_roofline": False, "offered_rps": rnd(rate0), "roofline_rps": rnd(roof),
        "runs": 1, "stopped_early": 0, "not_measured": NOT_MEASURED,
    }  # fmt: skip
