"""The optimisers behind calibration, behind one small signature so another (the evolutionary search
of distsim.search, when it lands) can replace them without touching the fit.

An optimiser minimises ``objective(u)`` over the unit box ``[0, 1]^d`` from ``u0`` within ``budget``
evaluations. The objective is a full simulation per call: without gradients, and rugged at small
scale (a request that joins a step earlier or later moves by a whole step), so both optimisers here
are derivative-free. Both are deterministic: the same objective gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

Objective = Callable[[np.ndarray], float]


@dataclass
class OptimizeResult:
    x: np.ndarray  # the best point found, in [0, 1]^d
    fun: float  # its objective value
    evaluations: int  # distinct points simulated
    history: list[float] = field(default_factory=list)  # objective of every distinct evaluation


Optimizer = Callable[[Objective, np.ndarray, int], OptimizeResult]


class Exhausted(Exception):
    """The evaluation budget is spent."""


class Budgeted:
    """The objective on the box, memoised, keeping the best point, refusing to exceed the budget."""

    def __init__(self, objective: Objective, budget: int):
        self.objective = objective
        self.budget = budget
        self.cache: dict[tuple[float, ...], float] = {}
        self.history: list[float] = []
        self.best_x: np.ndarray | None = None
        self.best_f = np.inf

    def __call__(self, u: np.ndarray) -> float:
        u = np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0)
        key = tuple(np.round(u, 12))
        if key in self.cache:
            return self.cache[key]
        if len(self.cache) >= self.budget:
            raise Exhausted
        f = float(self.objective(u))
        if not np.isfinite(f):
            f = 1e12
        self.cache[key] = f
        self.history.append(f)
        if f < self.best_f:
            self.best_f, self.best_x = f, u.copy()
        return f

    def result(self) -> OptimizeResult:
        return OptimizeResult(
            x=self.best_x, fun=self.best_f, evaluations=len(self.cache), history=self.history
        )


def nelder_mead(
    objective: Objective, u0: np.ndarray, budget: int = 300, restarts: int = 4, step: float = 0.05
) -> OptimizeResult:
    """scipy's bounded Nelder-Mead from ``u0``, restarted from the best point with a fresh simplex a
    third the size each time (a restart escapes the collapsed simplices that plateaus cause)."""
    f = objective if isinstance(objective, Budgeted) else Budgeted(objective, budget)
    x = np.clip(np.asarray(u0, dtype=np.float64), 0.0, 1.0)
    try:
        f(x)
        for _ in range(restarts + 1):
            simplex = [x]
            for i in range(x.size):
                y = x.copy()
                y[i] = y[i] + step if y[i] + step <= 1.0 else y[i] - step
                simplex.append(y)
            options = {"initial_simplex": np.array(simplex), "xatol": 1e-4, "fatol": 1e-6, "maxfev": budget}
            minimize(f, x, method="Nelder-Mead", bounds=[(0.0, 1.0)] * x.size, options=options)
            x = f.best_x.copy()
            step /= 3.0
    except Exhausted:
        pass
    return f.result()


def cma_es(
    objective: Objective, u0: np.ndarray, budget: int = 300, sigma: float = 0.08, polish: float = 0.25
) -> OptimizeResult:
    """CMA-ES (the ``cmaes`` package, seed 0) from ``u0``, then a Nelder-Mead polish of the best point
    with the last ``polish`` share of the budget. Sampling a population per generation copes with the
    rugged objective better than a simplex alone (on the shipped runs it reaches lower errors)."""
    from cmaes import CMA

    f = Budgeted(objective, budget)
    x = np.clip(np.asarray(u0, dtype=np.float64), 0.0, 1.0)
    search = max(budget - int(polish * budget), 1)
    try:
        f(x)
        opt = CMA(mean=x, sigma=sigma, bounds=np.array([[0.0, 1.0]] * x.size), seed=0)
        while len(f.cache) < search:
            opt.tell([(y, f(y)) for y in (opt.ask() for _ in range(opt.population_size))])
    except Exhausted:
        pass
    if budget - len(f.cache) > x.size + 1:
        nelder_mead(f, f.best_x, budget, restarts=2)
    return f.result()


OPTIMIZERS: dict[str, Optimizer] = {"cma-es": cma_es, "nelder-mead": nelder_mead}
