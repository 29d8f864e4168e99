"""The per-operator step model's GPU terms refitted on the real runs within the step tables' budget
(issue 24, item 3: "If a joint refit moves a GPU term, the step error may not rise more than 2 points
above the step-only fit").

    python -m distsim.fidelity.jointfit ../shared/data/h100_vllm_runs ../shared/data/h100_steps \
        [overrides...] [--iterations N] [--budget POINTS] [--out FILE.json]

The objective is :mod:`distsim.fidelity.runfit`'s: per run the relative errors of mean E2E, mean TTFT
and mean ITL, each run weighted 1 / sqrt(runs of its model). The unknowns are the GPU coefficients of
:data:`GPU` and the host and front-end terms of :data:`distsim.fidelity.runfit.TERMS`. The constraint:
every step table's mean absolute error (%) at most its value at the step-only fit (the start:
:data:`~distsim.instance.latency.roofline3.STEP_FIT`, ``python -m distsim.fidelity.steps ... --nnls``, with
any ``cluster.latency`` value the overrides set) plus ``--budget`` points. Step errors cost microseconds
(the step tables as a linear design, :func:`distsim.fidelity.steps.cli.nnls.design`), so the constraint is
evaluated exactly; replays cost seconds, so the runs are linearised: a forward-difference Jacobian of
the residuals (one replay of every run per unknown), the constrained linear least-squares problem solved
by SLSQP inside a trust region, the step taken when the replays confirm that it lowers the objective
(halved up to three times otherwise), 2-3 iterations.

Leave-one-model-out, runs: for each model, the same constrained solve from the fitted point with that
model's residuals and Jacobian rows left out and that model's step tables' constraints dropped too,
then that model's runs replayed at the values it gives. Steps: for each step model group, the solve
without that group's constraint (and without the runs of the same model), that group's tables scored at
the values it gives.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import minimize

from distsim import outputs
from distsim.errors import UserError
from distsim.fidelity import runfit
from distsim.fidelity.multifit.pool import ReplayPool
from distsim.fidelity.steps.compare import latency_settings
from distsim.fidelity.steps.data import StepTable, read_steps
from distsim.fidelity.steps.nnls import design, values_of
from distsim.fidelity.suite.data import read_suite
from distsim.fidelity.suite.replay import split_overrides
from distsim.instance.latency.roofline3 import (
    BOUNDS,
    LINEAR,
    STEP_FIT,
    Roofline3Coefficients,
    coefficients_from,
    linear_of,
)

# the GPU coefficients refitted: name -> forward-difference step (the trust region's unit)
GPU: dict[str, float] = {
    "memory_efficiency": 0.02,
    "layer_overhead_us": 4.0,
    "moe_layer_overhead_us": 6.0,
    "compute_efficiency": 0.03,
    "gemm_half_tokens": 15.0,
    "attention_efficiency": 0.04,
    "activation_bytes_hidden": 5.0,
    "activation_bytes_intermediate": 3.0,
    "expert_compute_efficiency": 0.05,
}
PREFIX = "cluster.latency."
# terms the step tables do not see (kernels only), fitted on the runs beside runfit.TERMS: (low, high, step)
RUN_TERMS: dict[str, tuple[float, float, float]] = {
    PREFIX + "all_reduce_latency_us": (0.0, 50.0, 3.0),
    **runfit.TERMS,
}
# which run model a step table's group measures (leave-one-model-out drops both together)
STEP_MODEL = {
    "llama-4-scout": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
}
Progress = Callable[[str], None]


class StepBudget:
    """Every step table as a linear design: per-table mean absolute error (%) at any coefficients."""

    def __init__(self, tables: Sequence[StepTable], overrides: Sequence[str] = ()):
        self.tables = list(tables)
        self.design = design(self.tables, latency_settings(list(overrides)))
        self.index = np.concatenate([np.full(len(t.rows), i) for i, t in enumerate(self.tables)])
        self.count = np.bincount(self.index).astype(float)
        self.names = [t.name for t in self.tables]
        self.groups = [t.model_group for t in self.tables]

    def errors(self, k: Roofline3Coefficients) -> np.ndarray:
        beta = linear_of(k)
        d = self.design
        predicted = d.predict(np.array([beta[name] for name in LINEAR]))
        rel = np.abs(predicted - d.measured) / d.measured * 100.0
        return np.bincount(self.index, rel) / self.count


def _known(option: str, names: Sequence[str] | None, known: Mapping[str, object]) -> None:
    """Refuse a name ``known`` lacks: it would silently fit fewer unknowns than asked for."""
    unknown = [n for n in names or () if n not in known]
    if unknown:
        raise UserError(f"{option}: no {', '.join(unknown)}; known: {', '.join(known)}")


@dataclass
class Problem:
    """The unknowns (config keys), their bounds and scales, and how values map onto coefficients."""

    keys: list[str]
    lo: np.ndarray
    hi: np.ndarray
    scale: np.ndarray
    base: Roofline3Coefficients

    @classmethod
    def make(cls, base: Roofline3Coefficients, gpu: Sequence[str] | None = None, run_terms: Sequence[str] | None = None) -> Problem:
        """The unknowns: the GPU coefficients named in ``gpu`` (default: all of :data:`GPU`) and the run
        terms named in ``run_terms`` (default: all of :data:`RUN_TERMS`); a name not among them is a
        UserError listing the known ones."""
        _known("--gpu", gpu, GPU)
        _known("--run-terms", run_terms, RUN_TERMS)
        keys, lo, hi, scale = [], [], [], []
        for name, h in GPU.items():
            if gpu is not None and name not in gpu:
                continue
            low, high, low_open = BOUNDS[name]
            keys.append(PREFIX + name)
            lo.append(low + (1e-3 if low_open else 0.0))
            hi.append(min(high, 1e4))
            scale.append(h)
        for key, (low, high, h) in RUN_TERMS.items():
            if run_terms is not None and key not in run_terms:
                continue
            keys.append(key)
            lo.append(low)
            hi.append(high)
            scale.append(h)
        if not keys:
            raise UserError("--gpu and --run-terms name nothing to fit")
        return cls(keys, np.array(lo), np.array(hi), np.array(scale), base)

    def coefficients(self, x: np.ndarray) -> Roofline3Coefficients:
        gpu = {k[len(PREFIX):]: float(v) for k, v in zip(self.keys, x) if k[len(PREFIX):] in GPU}
        return replace(self.base, **gpu)

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {k: float(v) for k, v in zip(self.keys, x)}


@dataclass
class Solve:
    """One constrained solve of the linearised run residuals."""

    x: np.ndarray
    predicted: float  # the linearised objective at x
    step_errors: np.ndarray
    success: bool
    message: str


def solve(
    problem: Problem, steps: StepBudget, limit: np.ndarray, x0: np.ndarray, res: np.ndarray, jac: np.ndarray,
    radius: float = 4.0, keep: np.ndarray | None = None,
) -> Solve:
    """min |res + J (x - x0)|^2 over x within the bounds and ``radius`` scaled steps of x0, every step
    table with ``keep`` (default: all) at most its ``limit``."""
    keep = np.ones(len(limit), bool) if keep is None else keep
    s = problem.scale
    lo = np.maximum(problem.lo, x0 - radius * s)
    hi = np.minimum(problem.hi, x0 + radius * s)
    js = jac * s

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        r = res + js @ z
        return float(r @ r), 2.0 * js.T @ r

    def cons(z: np.ndarray) -> np.ndarray:
        return (limit - steps.errors(problem.coefficients(x0 + z * s)))[keep]

    found = minimize(
        fun, np.zeros(len(x0)), jac=True, method="SLSQP",
        bounds=list(zip((lo - x0) / s, (hi - x0) / s)),
        constraints=[{"type": "ineq", "fun": cons}], options={"maxiter": 300, "ftol": 1e-10},
    )
    x = np.clip(x0 + found.x * s, lo, hi)
    errors = steps.errors(problem.coefficients(x))
    if np.any((errors - limit)[keep] > 1e-6):  # SLSQP's point infeasible: stay where we are
        return Solve(x0, float(res @ res), steps.errors(problem.coefficients(x0)), False, str(found.message))
    return Solve(x, float(fun(found.x)[0]), errors, bool(found.success), str(found.message))


@dataclass
class JointFit:
    problem: Problem
    limit: np.ndarray
    start: runfit.Scored
    best: runfit.Scored
    x: np.ndarray
    jacobian: np.ndarray
    step_start: np.ndarray
    step_errors: np.ndarray
    evaluations: int = 0
    seconds: float = 0.0
    history: list[dict] = field(default_factory=list)
    lomo: dict[str, runfit.Scored] = field(default_factory=dict)
    lomo_values: dict[str, dict[str, float]] = field(default_factory=dict)
    step_lomo: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> table -> error


def jacobian(runs: runfit.Runs, problem: Problem, x: np.ndarray, at: runfit.Scored) -> np.ndarray:
    """Forward differences of the residuals, one replay of every run per unknown (backwards at a bound)."""
    jac = np.zeros((len(at.residuals), len(x)))
    for j in range(len(x)):
        xj = x.copy()
        h = problem.scale[j]
        xj[j] = x[j] + h if x[j] + h <= problem.hi[j] else x[j] - h
        jac[:, j] = (runs.score(problem.values(xj)).residuals - at.residuals) / (xj[j] - x[j])
    return jac


def fit(runs: runfit.Runs, steps: StepBudget, problem: Problem, x0: np.ndarray, budget: float,  # long: the loop
        iterations: int = 3, progress: Progress | None = None) -> JointFit:
    """The joint refit (module docstring): Gauss-Newton steps under the step constraint."""
    say = progress or (lambda _line: None)
    began = time.perf_counter()
    step_start = steps.errors(problem.coefficients(x0))
    limit = step_start + budget
    x = x0.copy()
    current = first = runs.score(problem.values(x))
    say(f"start: objective {current.objective:.5f}")
    out = JointFit(problem, limit, first, first, x, np.zeros((len(first.residuals), len(x))), step_start, step_start)
    for it in range(iterations):
        jac = jacobian(runs, problem, x, current)
        out.jacobian = jac
        radius = 4.0
        for _ in range(4):
            found = solve(problem, steps, limit, x, current.residuals, jac, radius)
            trial = runs.score(problem.values(found.x))
            say(f"iteration {it + 1}: objective {trial.objective:.5f} (from {current.objective:.5f}, "
                f"linearised {found.predicted:.5f}, radius {radius:g}, {found.message})")
            if trial.objective < current.objective:
                break
            radius /= 2
        out.history.append({"iteration": it + 1, "objective": trial.objective, "values": problem.values(found.x)})
        if trial.objective >= current.objective:
            break
        x, current = found.x, trial
    out.best, out.x, out.step_errors = current, x, steps.errors(problem.coefficients(x))
    out.evaluations = runs.evaluations
    out.seconds = time.perf_counter() - began
    return out


def run_lomo(runs: runfit.Runs, steps: StepBudget, out: JointFit, progress: Progress | None = None) -> None:
    """Leave each run model out (its runs and its step tables' constraints), then each step group."""
    say = progress or (lambda _line: None)
    p = out.problem
    models = list(dict.fromkeys(r.model_name for r in runs.runs))
    rows = np.array([r.model_name for r in runs.runs for _ in runfit.METRICS])
    step_model = np.array([STEP_MODEL.get(_family(g), "") for g in steps.groups])
    for model in models:
        keep = rows != model
        found = solve(p, steps, out.limit, out.x, out.best.residuals[keep], out.jacobian[keep], keep=step_model != model)
        held = [r for r in runs.runs if r.model_name == model]
        out.lomo[model] = runs.score(p.values(found.x), held)
        out.lomo_values[model] = p.values(found.x)
        say(f"held out {model}: {out.lomo[model].objective:.5f}")
    for group in dict.fromkeys(steps.groups):
        keep_steps = np.array([g != group for g in steps.groups])
        keep = rows != STEP_MODEL.get(_family(group), "")
        found = solve(p, steps, out.limit, out.x, out.best.residuals[keep], out.jacobian[keep], keep=keep_steps)
        errors = steps.errors(p.coefficients(found.x))
        out.step_lomo[group] = {n: float(e) for n, e, k in zip(steps.names, errors, keep_steps) if not k}


def _family(group: str) -> str:
    """A step group's model family ("llama-3.1-70b-tp4-8layers" -> "llama-3.1-70b")."""
    for family in STEP_MODEL:
        if group.startswith(family):
            return family
    return group


def to_json(out: JointFit, steps: StepBudget, suite, overrides: Sequence[str], command: str) -> dict:
    """The fit as JSON: values, step errors (start, limit, fit, held out), run errors and slopes."""
    def scored(s: runfit.Scored) -> dict:
        h = runfit.headline(s.table)
        return {
            "values": s.values, "objective": s.objective, "medians": runfit.medians(s.table),
            "runs": {str(run): {m: float(row[m]) for m in runfit.METRICS} for (run, _), row in h.iterrows()},
        }

    body = {
        "command": command, "overrides": list(overrides), "held": runfit.HELD,
        "start": scored(out.start), "fit": scored(out.best),
        "steps": {n: {"start": float(a), "limit": float(b), "fit": float(c)}
                  for n, a, b, c in zip(steps.names, out.step_start, out.limit, out.step_errors)},
        "step_lomo": out.step_lomo, "history": out.history,
        "evaluations": out.evaluations, "seconds": out.seconds,
        "slopes": runfit.load_slopes(out.best.table, suite).to_dict("records"),
        "start_slopes": runfit.load_slopes(out.start.table, suite).to_dict("records"),
    }
    if out.lomo:
        import pandas as pd

        table = pd.concat([s.table for s in out.lomo.values()], ignore_index=True)
        h = runfit.headline(table)
        body["lomo"] = {
            "values": out.lomo_values, "medians": runfit.medians(table),
            "runs": {str(run): {m: float(row[m]) for m in runfit.METRICS} for (run, _), row in h.iterrows()},
        }
    return body


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m distsim.fidelity.jointfit", description=__doc__.splitlines()[0])
    p.add_argument("runs", help="a folder laid out like ../shared/data/h100_vllm_runs")
    p.add_argument("steps", help="a folder laid out like ../shared/data/h100_steps")
    p.add_argument("overrides", nargs="*", help="config overrides (cluster.latency.kind=roofline3)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--budget", type=float, default=2.0, help="points a step table's error may rise")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-lomo", action="store_true")
    p.add_argument("--gpu", default=None, help="the GPU coefficients to refit, comma-separated (default: all of GPU)")
    p.add_argument("--run-terms", default=None, help="the run-only terms to fit, comma-separated config keys (default: all)")
    p.add_argument("--out", default=None)
    args = p.parse_intermixed_args(argv)
    command = "python -m distsim.fidelity.jointfit " + " ".join(argv if argv is not None else sys.argv[1:])
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.out:
            outputs.prepare_file(args.out)  # a bad --out fails before the fit, not after it
        suite = read_suite(args.runs)
        config = split_overrides(args.overrides)[0]  # without the suite's own replay.prompts
        steps = StepBudget(read_steps(args.steps), config)
        base = coefficients_from(latency_settings(config).node, STEP_FIT)
        split = lambda text: None if text is None else [t.strip() for t in text.split(",") if t.strip()]  # noqa: E731
        problem = Problem.make(base, split(args.gpu), split(args.run_terms))
        host = runfit.start_values(args.overrides)  # the front end's; the latency terms from base
        x0 = np.array([getattr(base, k[len(PREFIX):]) if k.startswith(PREFIX) else host[k] for k in problem.keys])
        # every replay at the start's GPU terms (the step-only fit), the unknowns set over them
        own = ("all_reduce_latency_us", "step_overhead_us", "sequence_overhead_us")
        fixed = [f"{PREFIX}{k}={v!r}" for k, v in {**values_of(base), **{k: getattr(base, k) for k in own}}.items()]
        with ReplayPool([*args.overrides, *fixed], workers=args.workers) as pool:
            runs = runfit.Runs(suite, pool)
            out = fit(runs, steps, problem, x0, args.budget, args.iterations, say)
            if not args.no_lomo:
                run_lomo(runs, steps, out, say)
        body = to_json(out, steps, suite, args.overrides, command)
        if args.out:
            outputs.write_text(args.out, json.dumps(body, indent=2, allow_nan=True) + "\n")
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"fit": body["fit"]["values"], "medians": body["fit"]["medians"],
                      "lomo": body.get("lomo", {}).get("medians")}, indent=2))
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim", main)  # a full or closed stdout, and Ctrl-C, as one line
