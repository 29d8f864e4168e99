"""Fit ``cluster.latency`` coefficients to measured engine steps by least squares on log(simulated /
measured).

Each residual is weighted so that every model counts equally and, within a model, every step class
(the 36 decode rows of a dense table must not drown its 3 mixed ones): a row of class c of model m has
weight 1 / (models x classes of m x rows of c in m), so the objective is the mean over models of the
mean over classes of the mean squared log error. The coefficients are searched in the unit box of
their bounds (:data:`BOUNDS`) by ``scipy.optimize.least_squares`` from the values the latency model uses
now (configured, else its defaults; the table's start where it does not say). A coefficient that does not move ``gpu_step_us`` (a host
overhead, or one the latency model does not read yet) is left out of the fit and said so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from distsim.catalog import ModelSpec
from distsim.errors import UserError
from distsim.fidelity.steps.compare import LatencySettings, simulate
from distsim.fidelity.steps.data import StepTable


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    start: float  # where the fit starts when neither the config nor the latency model gives a value


BOUNDS: dict[str, Bound] = {
    "compute_efficiency": Bound(0.05, 1.0, 0.5),  # (0.05, 1]: the search never touches the low end
    "memory_efficiency": Bound(0.05, 1.0, 0.8),
    "attention_efficiency": Bound(0.05, 1.0, 0.5),
    "gemm_half_tokens": Bound(0.0, 4096.0, 64.0),
    "layer_overhead_us": Bound(0.0, 5000.0, 10.0),
    "sequence_overhead_us": Bound(0.0, 5000.0, 10.0),
    "step_overhead_us": Bound(0.0, 5000.0, 100.0),
}


@dataclass
class StepFit:
    values: dict[str, float]  # the fitted coefficients
    start: dict[str, float]
    objective: float  # weighted mean squared log error at the fit
    start_objective: float
    tables: list[str]  # the models fitted on
    rows: list[dict[str, object]]  # model, kind, class, line of every row used
    evaluations: int
    message: str
    unused: list[str] = field(default_factory=list)  # keys that do not change gpu_step_us

    @property
    def rms_error_pct(self) -> float:
        """The objective as a typical relative error: exp(sqrt(objective)) - 1, in percent."""
        return (math.exp(math.sqrt(self.objective)) - 1.0) * 100.0


def fit_keys(text: str) -> list[str]:
    """``--fit``'s comma-separated keys, each one of :data:`BOUNDS`."""
    keys = [k.strip().removeprefix("cluster.latency.") for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in BOUNDS]
    if not keys or bad:
        raise UserError(
            f"--fit: unknown coefficient {bad[0]!r}; known: {', '.join(BOUNDS)}"
            if bad
            else f"--fit: name at least one of {', '.join(BOUNDS)}"
        )
    return list(dict.fromkeys(keys))


def start_value(key: str, settings: LatencySettings, model: ModelSpec) -> float:
    """The value the latency model uses now (configured or its default), else the table's; in bounds."""
    b = BOUNDS[key]
    value = settings.value(key, model)
    value = b.start if value is None else value
    return min(max(value, b.low), b.high)


def row_weights(tables: Sequence[StepTable]) -> np.ndarray:
    """Each row's weight: 1 / (models x classes of its model x rows of its class in its model)."""
    out = []
    for t in tables:
        counts = t.rows["class"].value_counts()
        out.extend(1.0 / (len(tables) * len(counts) * counts[c]) for c in t.rows["class"])
    return np.asarray(out, dtype=np.float64)


class _Problem:
    """The residuals of a fit of ``keys`` over ``tables`` in the unit box of their bounds."""

    def __init__(self, tables: Sequence[StepTable], settings: LatencySettings, keys: Sequence[str]):
        self.tables, self.settings, self.keys = list(tables), settings, list(keys)
        self.sqrt_w = np.sqrt(row_weights(self.tables))
        self.log_measured = np.log(np.concatenate([t.rows["measured_us"].to_numpy() for t in self.tables]))
        self.evaluations = 0

    def values(self, u: np.ndarray) -> dict[str, float]:
        return {k: BOUNDS[k].low + float(x) * (BOUNDS[k].high - BOUNDS[k].low) for k, x in zip(self.keys, u)}

    def unit(self, values: dict[str, float]) -> np.ndarray:
        return np.array([(values[k] - BOUNDS[k].low) / (BOUNDS[k].high - BOUNDS[k].low) for k in self.keys])

    def residuals(self, u: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        simulated = simulate(self.tables, self.settings, self.values(u))
        return self.sqrt_w * (np.log(np.maximum(simulated, 1e-9)) - self.log_measured)

    def objective(self, values: dict[str, float]) -> float:
        return float(np.sum(self.residuals(self.unit(values)) ** 2))


def _moving(problem: _Problem, start: dict[str, float]) -> list[str]:
    """The keys whose change (a quarter of their range) moves some residual."""
    u0 = problem.unit(start)
    r0 = problem.residuals(u0)
    moving = []
    for i, key in enumerate(problem.keys):
        u = u0.copy()
        u[i] = u0[i] + 0.25 if u0[i] <= 0.5 else u0[i] - 0.25
        if np.any(problem.residuals(u) != r0):
            moving.append(key)
    return moving


def fit_steps(tables: Sequence[StepTable], settings: LatencySettings, keys: Sequence[str]) -> StepFit:
    """Fit ``keys`` to the rows of ``tables`` (see the module docstring)."""
    start = {k: start_value(k, settings, tables[0].model) for k in keys}
    moving = _moving(_Problem(tables, settings, keys), start)
    if not moving:
        raise UserError(f"--fit: none of {', '.join(keys)} changes the GPU step time (gpu_step_us)")
    problem = _Problem(tables, settings, moving)
    start = {k: start[k] for k in moving}  # the others stay as configured
    found = least_squares(
        problem.residuals,
        problem.unit(start),
        bounds=(0.0, 1.0),
        method="trf",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=2000,
    )
    values = problem.values(found.x)
    rows = [
        {"model": t.name, "kind": k, "class": c, "line": int(n)}
        for t in tables
        for k, c, n in zip(t.rows["kind"], t.rows["class"], t.rows["line"])
    ]
    return StepFit(
        values=values,
        start=start,
        objective=problem.objective(values),
        start_objective=problem.objective(start),
        tables=[t.name for t in tables],
        rows=rows,
        evaluations=problem.evaluations,
        message=str(found.message),
        unused=[k for k in keys if k not in moving],
    )
