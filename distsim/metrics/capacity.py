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

The fitness is that rate per GPU (``per: gpu``, the base run's mean GPUs), per dollar per hour, or raw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.instance.latency.base import StepShape
from distsim.metrics.summary import rnd
from distsim.request import Request

if TYPE_CHECKING:
    from collections.abc import Callable

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


def capacity(scenario: Scenario, base_summary: dict[str, Any], run_trial: Callable[[Scenario], dict[str, Any]]) -> dict[str, Any]:
    """summary.json's ``capacity`` section: the rate found, its bracket and what it cost. ``run_trial``
    simulates a scenario and returns its summary (distsim.simulate.run's)."""
    cfg = scenario.fitness
    requests = materialise(scenario)
    rate0 = offered_rps(requests)

    def attainment(summary: dict[str, Any]) -> float:
        return summary["goodput"]["slo_attainment"] or 0.0

    def trial(factor: float) -> Trial:
        return Trial(factor, factor * rate0, attainment(run_trial(trial_scenario(scenario, requests, factor))))

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
    }
