"""The joint refit of the per-operator step model (distsim.fidelity.jointfit): the step tables' budget is
evaluated exactly (the same per-table errors the step comparison gives), the constrained solve keeps
every table within its limit while it follows the runs' linearised pull, and a run-only term (the
collectives' latency) moves no step error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from stepkit import FIXTURE, SETTINGS

from distsim.fidelity.jointfit import PREFIX, Problem, StepBudget, solve
from distsim.fidelity.steps.compare import compare, latency_settings, simulate
from distsim.fidelity.steps.data import read_steps
from distsim.instance.latency.roofline3 import DEFAULTS


@pytest.fixture(scope="module")
def budget():
    return StepBudget(read_steps(FIXTURE), SETTINGS)


def test_budget_errors_are_the_step_comparison(budget):
    k = dataclasses.replace(DEFAULTS, memory_efficiency=0.7, layer_overhead_us=20.0)
    steps = compare(budget.tables, simulate(budget.tables, latency_settings(SETTINGS), {"memory_efficiency": 0.7, "layer_overhead_us": 20.0}))
    expected = steps.assign(a=steps["error_pct"].abs()).groupby("model", sort=False)["a"].mean()
    assert budget.errors(k) == pytest.approx(expected.to_numpy(), rel=1e-9)


def test_solve_follows_the_runs_within_the_budget(budget):
    problem = Problem.make(DEFAULTS, ["memory_efficiency", "layer_overhead_us"], [PREFIX + "all_reduce_latency_us"])
    x0 = np.array([DEFAULTS.memory_efficiency, DEFAULTS.layer_overhead_us, DEFAULTS.all_reduce_latency_us])
    start = budget.errors(problem.coefficients(x0))
    # one residual that wants a higher memory efficiency (faster steps); the layer overhead may move to
    # keep the tables within their limits
    res = np.array([0.3])
    jac = np.array([[-3.0, 0.0, 0.0]])
    for points in (0.5, 2.0):
        found = solve(problem, budget, start + points, x0, res, jac, radius=50.0)
        assert np.all(found.step_errors <= start + points + 1e-6)
        assert found.x[0] > x0[0]  # moved the way the runs pull
        assert found.predicted < float(res @ res)
    # the collectives' latency is no step-table term: it moves the runs, never a step error
    far = x0 + np.array([0.0, 0.0, 20.0])
    assert budget.errors(problem.coefficients(far)) == pytest.approx(start)
    held = solve(problem, budget, start + 2.0, x0, res, np.array([[0.0, 0.0, -0.01]]), radius=50.0)
    assert held.x[2] == pytest.approx(x0[2] + 30.0)  # where the linearised residual reaches 0
    assert np.all(held.x[:2] == x0[:2])


@pytest.mark.parametrize(
    ("gpu", "terms", "message"),
    [
        (["memory_efficency"], None, r"--gpu: no memory_efficency; known: memory_efficiency, "),
        (None, ["cluster.latency.step_overhead"], r"--run-terms: no cluster.latency.step_overhead; known: "),
        ([], [], r"--gpu and --run-terms name nothing to fit"),
    ],
)
def test_an_unknown_coefficient_name_is_refused_not_dropped(gpu, terms, message):
    from distsim.errors import UserError

    with pytest.raises(UserError, match=message):
        Problem.make(DEFAULTS, gpu, terms)
