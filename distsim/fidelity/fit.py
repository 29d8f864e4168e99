"""Fit a latency model's free parameters to measured runs by simulating them.

Each evaluation replays every run in full (same requests, same engine) with candidate coefficients;
its score (:mod:`distsim.fidelity.score`) is averaged over the runs. The coefficients are searched in a
unit box, on a log scale (each spans decades), by the optimiser passed in
(:mod:`distsim.fidelity.optimize`; CMA-ES by default), from the catalog roofline's values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from distsim.cluster.pools import resolve_pools
from distsim.fidelity.metrics import MetricComparison
from distsim.fidelity.optimize import Optimizer, cma_es
from distsim.fidelity.replay import replay, replay_config
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.score import DEFAULT_WEIGHTS, RunEvaluation, evaluate_replay, score
from distsim.instance.latency.base import StepShape
from distsim.instance.latency.roofline import DEFAULTS
from distsim.instance.latency.roofline3 import DEFAULTS as ROOFLINE3_DEFAULTS


@dataclass(frozen=True)
class Param:
    """One free coefficient and its search interval."""

    name: str
    low: float
    high: float
    log: bool

    def to_unit(self, value: float) -> float:
        value = min(max(value, self.low), self.high)
        if self.log:
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        if self.log:
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)


SPACES: dict[str, tuple[Param, ...]] = {
    "linear": (
        Param("base_us", 10.0, 1e5, True),
        Param("per_prefill_token_us", 1e-3, 1e2, True),
        Param("per_decode_token_us", 1e-2, 1e3, True),
    ),
    "roofline": (
        Param("compute_efficiency", 0.05, 1.0, True),
        Param("memory_efficiency", 0.05, 1.0, True),
        Param("step_overhead_us", 10.0, 50_000.0, True),
    ),
    # the shipped model on a new GPU: its matmul and memory rates and its small kernels' time per layer
    # (what differs between GPUs); the serving terms and the rest stay at the shipped values
    "roofline3": (
        Param("compute_efficiency", 0.05, 1.0, True),
        Param("memory_efficiency", 0.05, 1.0, True),
        Param("layer_overhead_us", 1.0, 1000.0, True),
    ),
}


@dataclass
class FitResult:
    kind: str
    coefficients: dict[str, float]
    objective: float
    evaluations: int
    start: dict[str, float]
    start_objective: float
    evaluations_at_best: dict[str, RunEvaluation]  # run name -> measured vs simulated at the fit

    @property
    def comparisons(self) -> dict[str, dict[str, MetricComparison]]:
        return {name: ev.comparison for name, ev in self.evaluations_at_best.items()}


def with_latency(
    base: DictConfig, kind: str, coefficients: dict[str, float], copy: bool = True
) -> DictConfig:
    """``base`` whose ``cluster.latency`` is ``kind`` with these coefficients (no profile); a copy
    unless ``copy`` is False (the fit's private configs are rewritten in place: copying costs more
    than a small simulation)."""
    cfg = base.copy() if copy else base
    lat = cfg.cluster.latency
    lat.kind = kind
    lat.profile = None
    for name, value in coefficients.items():
        lat[name] = float(value)
    return cfg


def starting_point(kind: str, base: DictConfig) -> dict[str, float]:
    """Where the search starts: the catalog's roofline for the run's GPU and model (for the linear
    model, the roofline's step times turned into the three linear coefficients)."""
    roof = with_latency(base, "roofline", {})
    pool = resolve_pools(roof.cluster)[0]
    if kind == "roofline3":
        return {p.name: float(getattr(ROOFLINE3_DEFAULTS, p.name)) for p in SPACES[kind]}
    if kind == "roofline":
        k = DEFAULTS  # one set for every GPU
        return {
            "compute_efficiency": k.compute_efficiency,
            "memory_efficiency": k.memory_efficiency,
            "step_overhead_us": k.step_overhead_us,
        }
    lm, ctx = pool.latency, 1000
    one = lm.step_us(StepShape(0, 0, 0, 1, ctx))
    many = lm.step_us(StepShape(0, 0, 0, 64, 64 * ctx))
    prefill = lm.step_us(StepShape(2048, 2048 * 2049 // 2, 2048, 0, 0))
    return {
        "base_us": float(one),
        "per_prefill_token_us": max((prefill - one) / 2048, 1e-3),
        "per_decode_token_us": max((many - one) / 63, 1e-2),
    }


def evaluate(
    runs: Sequence[MeasuredRun], bases: Sequence[DictConfig], kind: str, coefficients: dict[str, float]
) -> dict[str, RunEvaluation]:
    """Replay every run with these coefficients; measured vs simulated per run."""
    return {
        run.name: evaluate_replay(
            run.requests, replay(run, with_latency(base, kind, coefficients, copy=False)).requests
        )
        for run, base in zip(runs, bases)
    }


def fit(
    runs: Sequence[MeasuredRun],
    kind: str = "roofline",
    overrides: Sequence[str] = (),
    *,
    optimizer: Optimizer = cma_es,
    budget: int = 300,
    weights: dict[str, float] | None = None,
    start: dict[str, float] | None = None,
) -> FitResult:
    """Minimise the simulated-vs-measured error over ``runs`` for the ``kind`` latency model."""
    if kind not in SPACES:
        raise ValueError(f"no parameter space for latency model {kind!r}; known: {', '.join(SPACES)}")
    space = SPACES[kind]
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    bases = [replay_config(run, overrides) for run in runs]
    start = dict(start or starting_point(kind, bases[0]))
    u0 = np.array([p.to_unit(start[p.name]) for p in space])

    def coefficients(u: np.ndarray) -> dict[str, float]:
        return {p.name: p.from_unit(x) for p, x in zip(space, u)}

    def error(evals: dict[str, RunEvaluation]) -> float:
        return float(np.mean([score(e, weights) for e in evals.values()]))

    def objective(u: np.ndarray) -> float:
        return error(evaluate(runs, bases, kind, coefficients(u)))

    start_evals = evaluate(runs, bases, kind, coefficients(u0))
    found = optimizer(objective, u0, budget)
    best = coefficients(found.x)
    best_evals = evaluate(runs, bases, kind, best)
    if error(start_evals) <= error(best_evals):
        best, best_evals = coefficients(u0), start_evals
    return FitResult(
        kind=kind,
        coefficients=best,
        objective=error(best_evals),
        evaluations=found.evaluations,
        start=start,
        start_objective=error(start_evals),
        evaluations_at_best=best_evals,
    )
