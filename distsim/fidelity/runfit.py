"""What a GPU achieves and the serving terms around it, fitted on real runs toward their prior.

    python -m distsim.calibrate runs ../shared/data/h100_vllm_runs [overrides...] [--terms K,K] [--lomo] [--out FILE.json]

Two kinds of terms (:data:`TERMS`, config keys with bounds): the GPU terms (:data:`GPU_TERMS`: the
fractions of the datasheet's bandwidth and matmul peak the GPU achieves, its per-layer launch floor, ...),
which step tables pin where a GPU has them (the H100's, ``calibrate steps --fit``), and the serving terms
the step tables cannot see: the all-reduce's fixed time, the engine's host time, the front end's time per
request and per prompt token before the engine queues a request (``cluster.frontend.request_us``,
``per_input_token_us``). ``per_output_token_us`` is held at 0: a lag of every token by the same time moves
mean TTFT and E2E exactly as ``request_us`` does, so the means cannot tell them apart.

Every fitted term starts at its prior (the configured value, else the shipped one on the runs' GPU) and
keeps a prior row beside the runs' residuals, (x - prior) / sd x :data:`RESIDUAL_SD` (sd: :func:`prior_sd`),
so that runs move a term as far as they pin it. After the first Jacobian, the terms the runs cannot pin
(:func:`pinned`) are held at their prior; each held term, and each that ends on a bound, is a warning that
names it; :func:`identifiability` reports every term's standard errors.

The residuals are each run's whole-run relative errors of mean E2E, mean TTFT and mean ITL, each run
weighted 1 / sqrt(runs of its model) so that every model counts the same. The fit is Gauss-Newton with
bounds: the Jacobian by forward differences (one replay of every run per term), a bounded linear
least-squares step over the runs' and the prior's rows (``scipy.optimize.lsq_linear``: each evaluation is
a replay of every run, so the few steps of Gauss-Newton rather than ``least_squares``' many), halved while
it does not lower the objective; a handful of replays in all. Leave-one-model-out (``--lomo``): for each model, the same bounded step from the
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

# the fitted terms: (config key, lower bound, upper bound, forward-difference step). The GPU terms
# (GPU_TERMS: what a GPU achieves of its datasheet) are the step model's per-GPU coefficients; the rest
# are serving terms around the kernels.
TERMS: dict[str, tuple[float, float, float]] = {
    "cluster.latency.memory_efficiency": (0.3, 1.0, 0.03),
    "cluster.latency.compute_efficiency": (0.2, 1.0, 0.05),
    "cluster.latency.attention_efficiency": (0.05, 1.0, 0.05),
    "cluster.latency.layer_overhead_us": (0.0, 200.0, 5.0),
    "cluster.latency.all_reduce_latency_us": (0.0, 50.0, 2.0),
    "cluster.latency.all_reduce_link_efficiency": (0.05, 1.0, 0.1),
    "cluster.latency.all_reduce_two_shot_us": (0.0, 50.0, 2.0),
    "cluster.latency.sampler_call_us": (0.0, 2000.0, 100.0),
    "cluster.latency.paged_kv_read_factor": (0.5, 3.0, 0.1),
    "cluster.latency.step_overhead_us": (0.0, 5000.0, 100.0),
    "cluster.latency.sequence_overhead_us": (0.0, 200.0, 2.0),
    "cluster.frontend.request_us": (0.0, 50000.0, 1000.0),
    "cluster.frontend.per_input_token_us": (0.0, 50.0, 1.0),
}
GPU_TERMS = (
    "cluster.latency.memory_efficiency", "cluster.latency.compute_efficiency", "cluster.latency.attention_efficiency",
    "cluster.latency.layer_overhead_us", "cluster.latency.paged_kv_read_factor",
)
# what ``calibrate runs`` fits unless --terms says: the terms a run's mean E2E, TTFT and ITL can move
# apart (decode weight reads, prefill matmuls, the per-layer floor, the all-reduce at TP >= 2, the front
# end), not those that trade against them on whole-run figures: the sampler's (one per sampling path,
# measured: serving.SAMPLERS), the host's (hidden behind the GPU under async scheduling), the paged KV
# read factor (a second bandwidth), the link efficiency and prefill attention (the runs barely see them)
DEFAULT_TERMS = (
    "cluster.latency.memory_efficiency", "cluster.latency.compute_efficiency", "cluster.latency.layer_overhead_us",
    "cluster.latency.all_reduce_latency_us", "cluster.frontend.request_us", "cluster.frontend.per_input_token_us",
)
# How far each term's start (the shipped or configured value: the prior) may be off for a GPU or
# server the runs come from, one standard deviation. The GPU terms: the spread of achieved fractions
# of the datasheet across GPUs (bandwidth 0.75-0.91 of the datasheet on the H100 and the two RTX cards' runs,
# dense GEMMs 0.73-0.88: docs/calibration.md, "The prior"); the serving terms: a range their mechanism
# allows on another host.
PRIOR_SD: dict[str, float] = {
    "cluster.latency.memory_efficiency": 0.08,
    "cluster.latency.compute_efficiency": 0.12,
    "cluster.latency.attention_efficiency": 0.15,
    "cluster.latency.layer_overhead_us": 15.0,
    "cluster.latency.all_reduce_latency_us": 3.0,
    "cluster.latency.all_reduce_link_efficiency": 0.2,
    "cluster.latency.all_reduce_two_shot_us": 3.0,  # the H100 kernel profile's barrier; another link's may differ
    "cluster.latency.sampler_call_us": 50.0,
    "cluster.latency.paged_kv_read_factor": 0.15,
    "cluster.latency.step_overhead_us": 500.0,
    "cluster.latency.sequence_overhead_us": 20.0,
    "cluster.frontend.request_us": 2000.0,
    "cluster.frontend.per_input_token_us": 2.0,
}
# A GPU term measured on the GPU (the H100, whose step tables the shipped values are fitted on, or a
# value the catalog's ``achieved`` block gives from a run of it) is known far better than a datasheet's
# fraction: one run moves it only as far as its own errors stand out of the model's (RESIDUAL_SD).
MEASURED_SD: dict[str, float] = {
    "cluster.latency.memory_efficiency": 0.015,
    "cluster.latency.compute_efficiency": 0.03,
    "cluster.latency.attention_efficiency": 0.03,
    "cluster.latency.layer_overhead_us": 3.0,
    "cluster.latency.paged_kv_read_factor": 0.05,
}
# The scale of a run's relative error that the model cannot fit whatever its terms (about the held-out
# median error of the H100 runs' mean E2E, TTFT and ITL, 5.6-7.4%): a term one prior standard deviation
# away costs what a 5% miss of one figure costs, so the prior is a residual row (x - prior) / sd x
# RESIDUAL_SD beside the runs' rows. (At 0.08 the RTX 4090 run's fit stops at +5.3% E2E in sample,
# against +2.6% at 0.05; on the H100 runs a one-run fit moves the serving terms alike at both.)
RESIDUAL_SD = 0.05
# identifiability: a term whose standard error after the fit is above this share of its prior's was
# pinned by the prior, not by the runs
UNPINNED_SHARE = 0.85
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
    prior: dict[str, float] = field(default_factory=dict)  # each fitted term's prior (its start)
    identifiability: dict[str, dict[str, float]] = field(default_factory=dict)  # term -> standard errors
    condition: float = math.nan  # of the scaled J^T J of the runs' rows alone
    warnings: list[str] = field(default_factory=list)  # a term on a bound or not pinned by the runs


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


def _step(
    jac: np.ndarray, res: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray,
    prior: np.ndarray, sd: np.ndarray,
) -> np.ndarray:
    """The bounded Gauss-Newton step from ``x``: minimise |res + J dx|^2 + |(x + dx - prior) / sd x
    RESIDUAL_SD|^2 with lo <= x + dx <= hi (scaled)."""
    w = RESIDUAL_SD / sd
    a = np.vstack([jac * scale, np.diag(w * scale)])
    b = np.concatenate([-res, -(x - prior) * w])
    found = lsq_linear(a, b, bounds=((lo - x) / scale, (hi - x) / scale), method="bvls")
    return found.x * scale


def prior_cost(x: np.ndarray, prior: np.ndarray, sd: np.ndarray) -> float:
    """The prior rows' sum of squares at ``x``."""
    r = (x - prior) / sd * RESIDUAL_SD
    return float(np.dot(r, r))


def identifiability(jac: np.ndarray, keys: Sequence[str], sd: np.ndarray) -> tuple[dict[str, dict[str, float]], float]:
    """Per term, its standard error from the runs and the prior together (J^T J / RESIDUAL_SD^2 +
    diag(1 / sd^2))^-1 and from the runs alone (inf where the runs do not see it), and the condition
    number of the runs' J^T J over the terms they see, every term scaled by its prior sd (inf: some
    combination of them is not pinned at all)."""
    scaled = jac * sd / RESIDUAL_SD
    info = scaled.T @ scaled
    post = np.linalg.inv(info + np.eye(len(keys)))
    seen = np.diag(info) > 0
    eig = np.linalg.eigvalsh(info[np.ix_(seen, seen)]) if seen.any() else np.zeros(0)
    cond = float(eig[-1] / eig[0]) if len(eig) and eig[0] > 1e-12 * eig[-1] else math.inf
    out = {}
    for j, k in enumerate(keys):
        col = float(info[j, j])
        out[k] = {
            "prior_sd": float(sd[j]),
            "sd": float(sd[j] * math.sqrt(post[j, j])),
            "data_sd": float(sd[j] / math.sqrt(col)) if col > 0 else math.inf,
        }
    return out, cond


def pinned(jac: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which terms the runs pin, greedily: the most informative first, each kept when its standard error
    with the kept ones beside it is at most :data:`UNPINNED_SHARE` of its prior's (two terms the runs
    only see together keep the better seen one). Returns (kept mask, each term's share at its test)."""
    scaled = jac * sd / RESIDUAL_SD
    info = scaled.T @ scaled
    kept = np.zeros(len(sd), dtype=bool)
    share = np.ones(len(sd))
    for j in np.argsort(-np.diag(info), kind="stable"):
        trial = kept.copy()
        trial[j] = True
        idx = np.flatnonzero(trial)
        post = np.linalg.inv(info[np.ix_(idx, idx)] + np.eye(len(idx)))
        share[j] = math.sqrt(post[list(idx).index(j), list(idx).index(j)])
        if share[j] <= UNPINNED_SHARE:
            kept = trial
    return kept, share


def fit_warnings(
    values: dict[str, float], prior: dict[str, float], held: dict[str, float], gradient: dict[str, float],
) -> list[str]:
    """A term that ended on a bound (moved there, or held there by it against the runs' pull: ``gradient``,
    the runs' d(objective)/d(term) x its prior sd), or that the runs cannot pin (``held``: term -> its
    standard error's share of its prior's; held at its prior)."""
    out = []
    for k, v in values.items():
        lo, hi, _ = TERMS[k]
        tol = 1e-6 * (hi - lo)
        pull = gradient.get(k, 0.0)
        on_lo = v <= lo + tol and (abs(v - prior[k]) > tol or pull > 1e-4)
        on_hi = v >= hi - tol and (abs(v - prior[k]) > tol or pull < -1e-4)
        if on_lo or on_hi:
            out.append(f"{k} ended on its {'lower' if on_lo else 'upper'} bound ({v:.6g}): the runs push it "
                       "out of its range, so another term is missing or wrong for them")
        if k in held:
            out.append(f"{k} is not pinned by these runs (standard error {held[k]:.0%} of its prior's): held at "
                       "its prior; runs at other loads or shapes would pin it")
    return out


def steps_measured(hardware: str) -> bool:
    """Whether the shipped GPU terms on ``hardware`` are its own step tables' fit (the H100's)."""
    from distsim.catalog.hardware import load_hardware
    from distsim.instance.latency.roofline3 import FITTED_ON

    return load_hardware(hardware).name == FITTED_ON


def prior_sd(
    terms: Sequence[str], hardware: str | None = None, overrides: Sequence[str] = (), scale: float = 1.0,
) -> dict[str, float]:
    """Each term's prior standard deviation on GPU ``hardware``: :data:`MEASURED_SD` for a GPU term
    measured on it (the H100's step tables, the catalog's ``achieved`` values) and not set among
    ``overrides`` (a value given there starts the fit as a datasheet guess would), else :data:`PRIOR_SD`;
    each times ``scale`` (``--prior-scale``: above 1 a weaker prior, for many runs that pin the terms)."""
    from distsim.catalog.hardware import load_hardware
    from distsim.instance.latency.roofline3 import FITTED_ON

    measured: set[str] = set()
    if hardware is not None:
        hw = load_hardware(hardware)
        achieved = {f"cluster.latency.{k}" for k, _ in hw.achieved}
        measured = set(MEASURED_SD) if hw.name == FITTED_ON else achieved & set(MEASURED_SD)
    measured -= {o.split("=", 1)[0] for o in overrides}
    return {t: scale * (MEASURED_SD[t] if t in measured else PRIOR_SD[t]) for t in terms}


@dataclass
class Box:
    """The fitted terms' bounds, forward-difference steps, prior and prior sd, in ``keys`` order."""

    keys: list[str]
    sd: np.ndarray
    prior: np.ndarray

    @classmethod
    def of(cls, keys: Sequence[str], start: dict[str, float], sd: dict[str, float] | None) -> Box:
        box = cls(list(keys), np.array([(sd or PRIOR_SD).get(k, PRIOR_SD[k]) for k in keys]), np.zeros(len(keys)))
        box.prior = np.clip(np.array([start[k] for k in keys], dtype=float), box.lo, box.hi)
        return box

    @property
    def lo(self) -> np.ndarray:
        return np.array([TERMS[k][0] for k in self.keys])

    @property
    def hi(self) -> np.ndarray:
        return np.array([TERMS[k][1] for k in self.keys])

    @property
    def h(self) -> np.ndarray:
        return np.array([TERMS[k][2] for k in self.keys])

    def values(self, x: np.ndarray) -> dict[str, float]:
        return dict(zip(self.keys, (float(a) for a in x)))

    def step(self, jac: np.ndarray, res: np.ndarray, x: np.ndarray, active: np.ndarray) -> np.ndarray:
        """The bounded Gauss-Newton step of the ``active`` terms (the others stay)."""
        dx = np.zeros(len(self.keys))
        a = active
        if a.any():
            dx[a] = _step(jac[:, a], res, x[a], self.lo[a], self.hi[a], self.h[a], self.prior[a], self.sd[a])
        return dx

    def total(self, scored: Scored, x: np.ndarray) -> float:
        return scored.objective + prior_cost(x, self.prior, self.sd)


def _jacobian(runs: Runs, box: Box, x: np.ndarray, current: Scored, jac: np.ndarray, active: np.ndarray) -> None:
    """Forward differences of the ``active`` terms' columns of ``jac`` at ``x`` (one replay each)."""
    h, hi = box.h, box.hi
    for j in np.flatnonzero(active):
        xj = x.copy()
        xj[j] = xj[j] + h[j] if xj[j] + h[j] <= hi[j] else xj[j] - h[j]
        jac[:, j] = (runs.score(box.values(xj)).residuals - current.residuals) / (xj[j] - x[j])


def _retry_blind(
    runs: Runs, box: Box, x: np.ndarray, current: Scored, jac: np.ndarray, active: np.ndarray, share: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """A held term the runs did not see at all (a plateau of its difference at the start) tried again at
    ``x``: pinned from here on if the runs see it now."""
    blind = ~active & ~np.abs(jac).any(axis=0)
    if not blind.any():
        return active, share
    _jacobian(runs, box, x, current, jac, blind)
    again, share_again = pinned(jac, box.sd)
    newly = again & ~active
    return active | newly, np.where(newly, share_again, share)


def _diagnose(result: RunFit, box: Box, jac: np.ndarray, active: np.ndarray, share: np.ndarray) -> None:
    """The fit's identifiability (standard errors as fitted: the held terms at their prior) and warnings."""
    keys, sd = box.keys, box.sd
    result.identifiability, result.condition = identifiability(jac, keys, sd)
    if active.any():
        kept, _ = identifiability(jac[:, active], [k for j, k in enumerate(keys) if active[j]], sd[active])
        for k, v in kept.items():
            result.identifiability[k]["sd"] = v["sd"]
    for j, k in enumerate(keys):
        result.identifiability[k]["pinned"] = bool(active[j])
        if not active[j]:  # a held term's: its share at the test that held it
            result.identifiability[k]["sd"] = float(share[j] * sd[j])
    pull = dict(zip(keys, (2.0 * jac.T @ result.best.residuals) * sd))
    held = {k: float(share[j]) for j, k in enumerate(keys) if not active[j]}
    result.warnings = fit_warnings(result.best.values, result.prior, held, pull)


def fit(
    runs: Runs, start: dict[str, float], iterations: int = 3, lomo: bool = False, progress: Progress | None = None,
    terms: Sequence[str] | None = None, sd: dict[str, float] | None = None,
) -> RunFit:
    """Fit ``terms`` (default: :data:`DEFAULT_TERMS`) from ``start`` (see the module docstring),
    regularised toward ``start`` (the prior) with standard deviations ``sd`` (default :data:`PRIOR_SD`;
    :func:`prior_sd` gives a GPU's)."""
    say = progress or (lambda _line: None)
    box = Box.of(list(terms or DEFAULT_TERMS), start, sd)
    began = time.perf_counter()
    x = box.prior.copy()
    first = current = runs.score(box.values(x))
    total = current.objective
    say(f"start: objective {total:.5f}")
    jac = np.zeros((len(current.residuals), len(box.keys)))
    active, share = np.ones(len(box.keys), dtype=bool), np.zeros(len(box.keys))
    for it in range(iterations):
        _jacobian(runs, box, x, current, jac, active)
        if it == 0:  # what the runs cannot pin is held at its prior from here on
            active, share = pinned(jac, box.sd)
        else:
            active, share = _retry_blind(runs, box, x, current, jac, active, share)
        if not active.any():
            break
        dx = box.step(jac, current.residuals, x, active)
        for _ in range(4):
            xt = np.clip(x + dx, box.lo, box.hi)
            trial = runs.score(box.values(xt))
            say(f"iteration {it + 1}: objective {box.total(trial, xt):.5f} (from {total:.5f})")
            if box.total(trial, xt) < total:
                break
            dx = dx / 2
        if box.total(trial, xt) >= total:
            break
        x, current, total = xt, trial, box.total(trial, xt)
    result = RunFit(first, current, runs.evaluations, 0.0, jac.copy(), prior=box.values(box.prior))
    _diagnose(result, box, jac, active, share)
    if lomo:
        rows = {r.id: i for i, r in enumerate(runs.runs)}
        for model in dict.fromkeys(r.model_name for r in runs.runs):
            keep = np.array([runs.runs[rows[rid]].model_name != model for rid in rows for _ in METRICS])
            dx = box.step(jac[keep], current.residuals[keep], x, active)
            fold = box.values(np.clip(x + dx, box.lo, box.hi))
            result.lomo[model] = runs.score(fold, [r for r in runs.runs if r.model_name == model])
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
        "prior": fit_.prior,
        "identifiability": {"condition": fit_.condition, "terms": fit_.identifiability},
        "warnings": fit_.warnings,
    }
    if fit_.lomo:
        table = pd.concat([s.table for s in fit_.lomo.values()], ignore_index=True)
        out["lomo"] = {
            "values": fit_.lomo_values,
            "runs": {str(run): {m: float(row[m]) for m in METRICS} for (run, _), row in headline(table).iterrows()},
            "medians": medians(table),
        }
    return out


def start_values(overrides: Sequence[str], hardware: str | None = None) -> dict[str, float]:
    """The fitted terms' values the overrides give: configured, else the latency model's defaults on
    GPU ``hardware`` (the catalog's achieved values for it; default: the configured GPU)."""
    from omegaconf import OmegaConf

    from distsim.catalog.hardware import load_hardware
    from distsim.config.compose import load_config
    from distsim.instance.latency import roofline, roofline3

    cfg = load_config(split_overrides(overrides)[0])  # without the suite's own replay.prompts
    kind = OmegaConf.select(cfg, "cluster.latency.kind")
    hw = load_hardware(hardware or OmegaConf.select(cfg, "cluster.hardware"))
    defaults = roofline3.gpu_defaults(hw) if kind == "roofline3" else roofline.DEFAULTS
    out = {}
    for key in TERMS:
        value = OmegaConf.select(cfg, key)
        if value is None and key.startswith("cluster.latency."):
            value = getattr(defaults, key.rsplit(".", 1)[1])
        out[key] = float(value or 0.0)
    return out
