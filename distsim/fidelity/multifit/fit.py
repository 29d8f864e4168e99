"""One coefficient set fitted across many measured runs at once (issue 17), and leave-one-model-out.

    python -m distsim.calibrate --suite ../shared/data/h100_vllm_runs [--params KEY=LOW:HIGH[:log],...]

A candidate (values for config keys, :mod:`distsim.fidelity.multifit.fit.space`) is scored by replaying
every run of a suite folder (:mod:`distsim.fidelity.suite.replay`, in worker processes:
:mod:`distsim.fidelity.multifit.fit.pool`). A run's term is the weighted mean of the |relative error| of its
whole-run mean E2E, mean TTFT and itl_mean (weight 2 each) and p90, p99 of E2E and TTFT (weight 1
each), as the suite computes them, capped at :data:`RUN_CAP` so a run that tips into an unbounded queue
cannot outweigh the rest. Terms are averaged within each model, then across models, so a model with
many runs weighs as much as one with a single run. The search is :mod:`distsim.fidelity.optimize`'s
(CMA-ES, then its polish) from the current values; one set for every GPU (only datasheets differ).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from distsim.errors import UserError
from distsim.fidelity.fit import Param
from distsim.fidelity.metrics import error_pct
from distsim.fidelity.multifit.pool import Replay, ReplayPool
from distsim.fidelity.optimize import Optimizer, cma_es
from distsim.fidelity.suite.data import Suite, SuiteRun
from distsim.fidelity.suite.metrics import WHOLE_RUN
from distsim.fidelity.suite.replay import SuiteResult, compare_metrics, skip_reason

WEIGHTS: dict[str, float] = {
    "e2e_mean": 2.0,
    "ttft_mean": 2.0,
    "itl_mean": 2.0,
    "e2e_p90": 1.0,
    "e2e_p99": 1.0,
    "ttft_p90": 1.0,
    "ttft_p99": 1.0,
}
RUN_CAP = 2.0  # the most one run's term can be (200%): a run whose queue blows up saturates here
Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunError:
    """One run's whole-run errors (signed fractions) and its capped term in the objective."""

    run_id: str
    model: str  # experiments.csv's ``model`` column: the averaging group
    errors: dict[str, float]
    term: float


@dataclass
class Evaluation:
    """Every selected run replayed with one set of values."""

    values: dict[str, float]
    runs: list[RunError]
    objective: float
    seconds: float
    replays: list[Replay] = field(repr=False)
    compare: Callable[[list[Replay]], SuiteResult] = field(repr=False)

    @cached_property
    def result(self) -> SuiteResult:
        """The suite's comparison (every stage, the peers' mpe, notes), built only for the evaluations a
        report shows: it costs as much as a small replay per run."""
        return self.compare(self.replays)

    @property
    def replay_seconds(self) -> float:
        """The replays' own times summed: what the evaluation costs on one core."""
        return float(sum(rep.seconds for rep in self.replays))

    @property
    def warnings(self) -> dict[str, tuple[str, ...]]:
        """Run id -> the config warnings its replay gave."""
        return {rep.run_id: rep.warnings for rep in self.replays if rep.warnings}


def run_term(errors: dict[str, float], weights: dict[str, float] = WEIGHTS, cap: float = RUN_CAP) -> float:
    """Weighted mean |error| over the measured metrics of ``weights``, at most ``cap``; a metric the
    replay could not compute (no request completed) makes it ``cap``."""
    total = wsum = 0.0
    for metric, w in weights.items():
        if metric not in errors:
            continue
        if not math.isfinite(errors[metric]):
            return cap
        total, wsum = total + w * abs(errors[metric]), wsum + w
    return min(total / wsum, cap) if wsum else cap


def suite_objective(runs: Sequence[RunError]) -> float:
    """Mean over models of the mean term of each model's runs (runs in order: deterministic sums)."""
    by_model: dict[str, list[float]] = {}
    for r in runs:
        by_model.setdefault(r.model, []).append(r.term)
    return float(np.mean([np.mean(terms) for terms in by_model.values()])) if by_model else math.nan


def fit_runs(suite: Suite, ids: Sequence[str] | None = None) -> tuple[list[SuiteRun], list[tuple[str, str]]]:
    """The runs to fit (those of ``ids``, or all) that can be compared, and (id, reason) for the rest."""
    runs, skipped = [], []
    for run in suite.select(ids):
        reason = skip_reason(run, suite)
        if reason is None:
            runs.append(run)
        else:
            skipped.append((run.id, reason))
    if not runs:
        raise UserError(
            f"no run of {suite.root} can be fitted: " + "; ".join(f"{i}: {w}" for i, w in skipped)
        )
    return runs, skipped


def whole_run_measured(measured: pd.DataFrame) -> dict[str, float]:
    """A run's measured whole-run value of each metric of the objective."""
    whole = measured[(measured["stage_index"] == WHOLE_RUN) & measured["metric_name"].isin(list(WEIGHTS))]
    return dict(whole.drop_duplicates("metric_name").set_index("metric_name")["actual"].astype(float))


class SuiteEvaluator:
    """Scores a set of values on a fixed list of runs (one replay of each per call)."""

    def __init__(self, suite: Suite, runs: Sequence[SuiteRun], pool: ReplayPool):
        self.runs, self.pool = list(runs), pool
        self.measured = {r.id: suite.measured_for(r) for r in self.runs}
        self.actual = {r.id: whole_run_measured(self.measured[r.id]) for r in self.runs}
        self.peers = sorted(suite.measured["simulator"].unique())

    def __call__(self, values: dict[str, float]) -> Evaluation:
        started = time.perf_counter()
        replays = self.pool.replay(self.runs, values)
        errors = []
        for run, rep in zip(self.runs, replays):
            sim = {} if rep.metrics is None else _whole_run(rep.metrics)
            errs = {m: error_pct(a, sim.get(m, math.nan)) / 100.0 for m, a in self.actual[run.id].items()}
            errors.append(RunError(run.id, run.model_name, errs, run_term(errs)))
        seconds = time.perf_counter() - started
        return Evaluation(dict(values), errors, suite_objective(errors), seconds, replays, self.compare)

    def compare(self, replays: list[Replay]) -> SuiteResult:
        """The suite's :class:`SuiteResult` of these replays (same rows as ``python -m
        distsim.fidelity.suite`` writes for them)."""
        result = SuiteResult(pd.DataFrame(), self.peers)
        tables = []
        for run, rep in zip(self.runs, replays):
            metrics = rep.metrics
            if metrics is None:  # a failed replay: every simulated figure missing
                metrics = pd.DataFrame({"stage": [WHOLE_RUN], "metric": ["e2e_mean"], "value": [math.nan]})
            tables.append(compare_metrics(run, metrics, self.measured[run.id], self.peers))
            result.notes[run.id] = _notes(run, rep)
            result.seconds[run.id] = rep.seconds
        result.table = pd.concat(tables, ignore_index=True)
        return result


def _whole_run(metrics: pd.DataFrame) -> dict[str, float]:
    whole = metrics[metrics["stage"] == WHOLE_RUN]
    return dict(zip(whole["metric"], whole["value"].astype(float)))


def _notes(run: SuiteRun, rep: Replay) -> list[str]:
    if rep.failure is not None:
        return [*run.flags(), f"replay failed: {rep.failure}"]
    unfinished = (
        [] if rep.completed == rep.requests else [f"{rep.completed} of {rep.requests} requests completed"]
    )
    return run.flags() + unfinished


@dataclass
class SuiteFit:
    """The outcome of one fit: where it started, where it ended, what it cost."""

    params: tuple[Param, ...]
    start: Evaluation
    best: Evaluation
    budget: int
    evaluations: int
    eval_seconds: list[float] = field(default_factory=list)  # wall time of every evaluation, in order
    replay_seconds: list[float] = field(default_factory=list)  # the same on one core (replays summed)


@dataclass
class _Tracked:
    """The optimiser's objective on the unit box, keeping the first and the best evaluation (so the fit
    needs no extra replay at the end) and the time of each."""

    evaluate: SuiteEvaluator
    params: Sequence[Param]
    start: dict[str, float]
    budget: int
    progress: Progress | None = None
    first: Evaluation | None = None
    best: Evaluation | None = None
    seconds: list[float] = field(default_factory=list)
    replay_seconds: list[float] = field(default_factory=list)

    @property
    def u0(self) -> np.ndarray:
        return np.array([p.to_unit(self.start[p.name]) for p in self.params])

    def values(self, u: np.ndarray) -> dict[str, float]:
        if np.array_equal(u, self.u0):
            return dict(self.start)  # exactly the start, not its round trip through the box
        return {p.name: p.from_unit(x) for p, x in zip(self.params, u)}

    def __call__(self, u: np.ndarray) -> float:
        ev = self.evaluate(self.values(u))
        self.seconds.append(ev.seconds)
        self.replay_seconds.append(ev.replay_seconds)
        if self.first is None:
            self.first = ev
            self._say(f"run {run}: warning: {line}" for run, lines in ev.warnings.items() for line in lines)
        if self.best is None or ev.objective < self.best.objective:
            self.best = ev
        n, best = len(self.seconds), self.best.objective
        line = f"evaluation {n}/{self.budget}: objective {ev.objective:.4f} (best {best:.4f})"
        self._say([f"{line} in {ev.seconds:.1f} s"])
        return ev.objective

    def _say(self, lines: Iterable[str]) -> None:
        for line in lines if self.progress else ():
            self.progress(line)


def fit_suite(
    evaluate: SuiteEvaluator,
    params: Sequence[Param],
    start: dict[str, float],
    budget: int,
    *,
    optimizer: Optimizer = cma_es,
    progress: Progress | None = None,
) -> SuiteFit:
    """Minimise :func:`suite_objective` over ``params`` from ``start`` within ``budget`` evaluations."""
    if budget < 1:
        raise UserError(f"budget must be at least 1 evaluation (got {budget})")
    t = _Tracked(evaluate, params, start, budget, progress)
    found = optimizer(t, t.u0, budget)
    assert t.first is not None and t.best is not None  # the optimisers evaluate u0 first
    return SuiteFit(tuple(params), t.first, t.best, budget, found.evaluations, t.seconds, t.replay_seconds)
