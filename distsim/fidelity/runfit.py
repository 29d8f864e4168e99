"""Host and front-end terms fitted on real runs with the GPU terms frozen.

    python -m distsim.calibrate runs ../shared/data/h100_vllm_runs [overrides...] [--terms K,K] [--lomo] [--out FILE.json]

The GPU terms come from the step tables (``python -m distsim.calibrate steps ... --fit``) and stay as
configured; only the terms the step tables cannot see are fitted on the runs: the engine's host time per
step (``cluster.latency.step_overhead_us``) and per scheduled sequence (``sequence_overhead_us``), and the
front end's time per request and per prompt token before the engine queues a request
(``cluster.frontend.request_us``, ``per_input_token_us``). ``per_output_token_us`` is held at 0: a lag of
every token by the same time moves mean TTFT and E2E exactly as ``request_us`` does, so the means cannot
tell them apart.

The residuals are each run's whole-run relative errors of mean E2E, mean TTFT and mean ITL, each run
weighted 1 / sqrt(runs of its model) so that every model counts the same. The fit is Gauss-Newton with
bounds: the Jacobian by forward differences (one replay of every run per term), a bounded linear
least-squares step (``scipy.optimize.lsq_linear``), halved while it does not lower the objective; a
handful of replays in all. Leave-one-model-out (``--lomo``): for each model, the same bounded step from the
all-runs point with that model's residuals and Jacobian rows left out, then that model's runs replayed
at the values it gives.

The load slope: for each run measured at two rates (stages), the slope of mean ITL and mean
TTFT against the rate, measured and simulated, and the relative error of the simulated slope.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from distsim.fidelity.metrics import WHOLE_RUN, error_pct
from distsim.fidelity.pool import Replay, ReplayPool
from distsim.fidelity.replay import split_overrides
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.suite.data import Suite, SuiteRun
from distsim.fidelity.suite.replay import fit_runs

# the fitted terms: (config key, lower bound, upper bound, forward-difference step)
TERMS: dict[str, tuple[float, float, float]] = {
    "cluster.latency.all_reduce_latency_us": (0.0, 50.0, 2.0),
    "cluster.latency.all_reduce_link_efficiency": (0.05, 1.0, 0.1),
    "cluster.latency.sampler_call_us": (0.0, 2000.0, 100.0),
    "cluster.latency.paged_kv_read_factor": (0.5, 3.0, 0.1),
    "cluster.latency.step_overhead_us": (0.0, 5000.0, 100.0),
    "cluster.latency.sequence_overhead_us": (0.0, 200.0, 2.0),
    "cluster.frontend.request_us": (0.0, 50000.0, 1000.0),
    "cluster.frontend.per_input_token_us": (0.0, 50.0, 1.0),
}
HELD = {"cluster.frontend.per_output_token_us": 0.0}
METRICS = ("e2e_mean", "ttft_mean", "itl_mean")
Progress = Callable[[str], None]


@dataclass
class Scored:
    """Every run replayed at one set of values: per-run, per-stage metrics and the residual vector."""

    values: dict[str, float]
    table: pd.DataFrame  # run, model, stage, metric, measured, simulated, error_pct
    residuals: np.ndarray
    objective: float


@dataclass
class RunFit:
    start: Scored
    best: Scored
    evaluations: int
    seconds: float
    jacobian: np.ndarray
    lomo: dict[str, Scored] = field(default_factory=dict)  # model -> its runs at the fold's values
    lomo_values: dict[str, dict[str, float]] = field(default_factory=dict)


class Runs:
    """Measured runs (each with its measured figures by (stage, metric)), replayed in a pool, scored as
    residuals. ``rates``: each run's stage rates, for the load slopes; ``skipped``: (run, reason) pairs
    that could not be fitted. :meth:`of_suite` builds them from a folder of runs with aggregates."""

    def __init__(
        self, runs: Sequence[SuiteRun | MeasuredRun], measured: dict[str, dict[tuple[int, str], float]], pool: ReplayPool,
        rates: dict[str, list[float]] | None = None, skipped: Sequence[tuple[str, str]] = (),
    ):
        self.runs, self.measured, self.pool = list(runs), measured, pool
        self.rates, self.skipped = dict(rates or {}), list(skipped)
        counts: dict[str, int] = {}
        for r in self.runs:
            counts[r.model_name] = counts.get(r.model_name, 0) + 1
        self.weight = {r.id: 1.0 / math.sqrt(counts[r.model_name]) for r in self.runs}
        self.evaluations = 0

    @classmethod
    def of_suite(cls, suite: Suite, pool: ReplayPool, ids: Sequence[str] | None = None) -> Runs:
        """The suite's runs that can be fitted (``ids`` picks some), with their measured aggregates."""
        runs, skipped = fit_runs(suite, ids)
        return cls(runs, {r.id: _measured(suite, r) for r in runs}, pool, stage_rates(suite), skipped)

    def score(self, values: dict[str, float], runs: Sequence[SuiteRun] | None = None) -> Scored:
        runs = list(self.runs if runs is None else runs)
        replays = self.pool.replay(runs, {**values, **HELD})
        self.evaluations += 1
        table = pd.concat([self._rows(r, rep) for r, rep in zip(runs, replays)], ignore_index=True)
        res = residuals(table, [r.id for r in runs], self.weight)
        return Scored(dict(values), table, res, float(np.sum(res * res)))

    def _rows(self, run: SuiteRun, rep: Replay) -> pd.DataFrame:
        sim = {} if rep.metrics is None else {(int(s), m): float(v) for s, m, v in rep.metrics[["stage", "metric", "value"]].itertuples(index=False)}
        rows = [
            (run.id, run.model_name, stage, metric, actual, sim.get((stage, metric), math.nan))
            for (stage, metric), actual in self.measured[run.id].items()
        ]
        t = pd.DataFrame(rows, columns=["run", "model", "stage", "metric", "measured", "simulated"])
        t["error_pct"] = [error_pct(a, s) for a, s in zip(t["measured"], t["simulated"])]
        return t


def _measured(suite: Suite, run: SuiteRun) -> dict[tuple[int, str], float]:
    m = suite.measured_for(run).drop_duplicates(["stage_index", "metric_name"])
    return {(int(s), str(k)): float(a) for s, k, a in m[["stage_index", "metric_name", "actual"]].itertuples(index=False)}


def residuals(table: pd.DataFrame, run_ids: Sequence[str], weight: dict[str, float]) -> np.ndarray:
    """Per run (in ``run_ids`` order) the whole-run relative errors of :data:`METRICS`, weighted; a
    missing figure (no request completed) counts as a 200% error."""
    whole = table[table["stage"] == WHOLE_RUN].set_index(["run", "metric"])["error_pct"]
    out = []
    for rid in run_ids:
        for m in METRICS:
            e = float(whole.get((rid, m), math.nan)) / 100.0
            out.append(weight[rid] * (e if math.isfinite(e) else 2.0))
    return np.asarray(out)


def _step(jac: np.ndarray, res: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The bounded Gauss-Newton step from ``x``: minimise |res + J dx| with lo <= x + dx <= hi (scaled)."""
    found = lsq_linear(jac * scale, -res, bounds=((lo - x) / scale, (hi - x) / scale), method="bvls")
    return found.x * scale


def fit(
    runs: Runs, start: dict[str, float], iterations: int = 3, lomo: bool = False, progress: Progress | None = None,
    terms: Sequence[str] | None = None,
) -> RunFit:
    """Fit ``terms`` (default: every one of :data:`TERMS`) from ``start`` (see the module docstring)."""
    say = progress or (lambda _line: None)
    keys = list(terms or TERMS)
    lo = np.array([TERMS[k][0] for k in keys])
    hi = np.array([TERMS[k][1] for k in keys])
    h = np.array([TERMS[k][2] for k in keys])
    began = time.perf_counter()
    x = np.clip(np.array([start[k] for k in keys], dtype=float), lo, hi)
    values = lambda v: dict(zip(keys, (float(a) for a in v)))  # noqa: E731
    first = current = runs.score(values(x))
    say(f"start: objective {current.objective:.5f}")
    jac = np.zeros((len(current.residuals), len(keys)))
    for it in range(iterations):
        for j in range(len(keys)):
            xj = x.copy()
            xj[j] = xj[j] + h[j] if xj[j] + h[j] <= hi[j] else xj[j] - h[j]
            jac[:, j] = (runs.score(values(xj)).residuals - current.residuals) / (xj[j] - x[j])
        dx = _step(jac, current.residuals, x, lo, hi, h)
        for _ in range(4):
            trial = runs.score(values(np.clip(x + dx, lo, hi)))
            say(f"iteration {it + 1}: objective {trial.objective:.5f} (from {current.objective:.5f})")
            if trial.objective < current.objective:
                break
            dx = dx / 2
        if trial.objective >= current.objective:
            break
        x, current = np.clip(x + dx, lo, hi), trial
    result = RunFit(first, current, runs.evaluations, 0.0, jac.copy())
    if lomo:
        models = list(dict.fromkeys(r.model_name for r in runs.runs))
        rows = {r.id: i for i, r in enumerate(runs.runs)}
        for model in models:
            keep = np.array([runs.runs[rows[rid]].model_name != model for rid in rows for _ in METRICS])
            dx = _step(jac[keep], current.residuals[keep], x, lo, hi, h)
            fold = values(np.clip(x + dx, lo, hi))
            held = [r for r in runs.runs if r.model_name == model]
            result.lomo[model] = runs.score(fold, held)
            result.lomo_values[model] = fold
            say(f"held out {model}: {fold}")
    result.evaluations = runs.evaluations
    result.seconds = time.perf_counter() - began
    return result


def stage_rates(suite: Suite) -> dict[str, list[float]]:
    """Each run's offered rate per stage (req/s), by run id."""
    return {r.id: [s.rate_rps for s in r.workload.stages] for r in suite.runs}


def load_slopes(table: pd.DataFrame, rates: dict[str, list[float]]) -> pd.DataFrame:
    """Per run measured at two rates (``rates``: :func:`stage_rates`): the slope of mean ITL and mean TTFT
    against the rate (ms per req/s), measured and simulated, and the simulated slope's error in percent."""
    rows = []
    for run, part in table.groupby("run", sort=False):
        r = rates.get(str(run), [])
        if len(r) != 2 or r[0] == r[1]:
            continue
        got = part.set_index(["stage", "metric"])
        for metric in ("itl_mean", "ttft_mean"):
            try:
                m0, m1 = got.loc[(0, metric), "measured"], got.loc[(1, metric), "measured"]
                s0, s1 = got.loc[(0, metric), "simulated"], got.loc[(1, metric), "simulated"]
            except KeyError:
                continue
            meas, sim = (m1 - m0) / (r[1] - r[0]), (s1 - s0) / (r[1] - r[0])
            rows.append((str(run), part["model"].iloc[0], metric, r[0], r[1], meas, sim, error_pct(meas, sim)))
    return pd.DataFrame(rows, columns=["run", "model", "metric", "rate0", "rate1", "measured", "simulated", "error_pct"])


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """Whole-run errors (%) of :data:`METRICS`, one row per run."""
    whole = table[(table["stage"] == WHOLE_RUN) & table["metric"].isin(METRICS)]
    return whole.pivot_table(index=["run", "model"], columns="metric", values="error_pct", sort=False)[list(METRICS)]


def medians(table: pd.DataFrame) -> dict[str, float]:
    return {m: float(v) for m, v in headline(table).abs().median().items()}


def to_json(fit_: RunFit, runs: Runs, overrides: Sequence[str], command: str) -> dict:
    def scored(s: Scored) -> dict:
        h = headline(s.table)
        return {
            "values": s.values,
            "objective": s.objective,
            "runs": {str(run): {m: float(row[m]) for m in METRICS} for (run, _), row in h.iterrows()},
            "medians": medians(s.table),
        }

    out = {
        "command": command,
        "overrides": list(overrides),
        "held": HELD,
        "start": scored(fit_.start),
        "fit": scored(fit_.best),
        "evaluations": fit_.evaluations,
        "seconds": fit_.seconds,
        "slopes": load_slopes(fit_.best.table, runs.rates).to_dict("records"),
    }
    if fit_.lomo:
        table = pd.concat([s.table for s in fit_.lomo.values()], ignore_index=True)
        out["lomo"] = {
            "values": fit_.lomo_values,
            "runs": {str(run): {m: float(row[m]) for m in METRICS} for (run, _), row in headline(table).iterrows()},
            "medians": medians(table),
        }
    return out


def start_values(overrides: Sequence[str]) -> dict[str, float]:
    """The fitted terms' values the overrides give: configured, else the latency model's defaults."""
    from omegaconf import OmegaConf

    from distsim.config.compose import load_config
    from distsim.instance.latency import roofline, roofline3

    cfg = load_config(split_overrides(overrides)[0])  # without the suite's own replay.prompts
    kind = OmegaConf.select(cfg, "cluster.latency.kind")
    defaults = roofline3.DEFAULTS if kind == "roofline3" else roofline.DEFAULTS
    out = {}
    for key in TERMS:
        value = OmegaConf.select(cfg, key)
        if value is None and key.startswith("cluster.latency."):
            value = getattr(defaults, key.rsplit(".", 1)[1])
        out[key] = float(value or 0.0)
    return out
