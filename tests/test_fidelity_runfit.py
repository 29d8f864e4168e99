"""Run-level fit of the host and front-end terms with the GPU terms frozen (distsim.fidelity.runfit):
its residuals, the load slope of two-rate runs, the start values, and a two-run fit end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distsim.fidelity import runfit
from distsim.fidelity.pool import ReplayPool
from distsim.fidelity.suite.data import read_suite

RUNS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_vllm_runs"


def table(rows):
    t = pd.DataFrame(rows, columns=["run", "model", "stage", "metric", "measured", "simulated"])
    t["error_pct"] = (t["simulated"] - t["measured"]) / t["measured"] * 100
    return t


def test_residuals_weigh_each_model_the_same_and_cap_missing_figures():
    rows = []
    for run, err in (("a", 0.1), ("b", 0.2), ("c", 0.3)):
        for m in runfit.METRICS:
            rows.append((run, "x" if run != "c" else "y", -1, m, 100.0, 100.0 * (1 + err)))
    t = table(rows)
    t.loc[(t.run == "c") & (t.metric == "itl_mean"), "error_pct"] = math.nan
    w = {"a": 1 / math.sqrt(2), "b": 1 / math.sqrt(2), "c": 1.0}
    r = runfit.residuals(t, ["a", "b", "c"], w)
    assert r[:3] == pytest.approx([0.1 / math.sqrt(2)] * 3) and r[3:6] == pytest.approx([0.2 / math.sqrt(2)] * 3)
    assert r[6:].tolist() == pytest.approx([0.3, 0.3, 2.0])


@pytest.mark.skipif(not RUNS.is_dir(), reason=f"{RUNS} is absent")
def test_load_slope_of_a_two_rate_run():
    suite = read_suite(RUNS)  # run 60: general-lite at 2.5 then 6 req/s
    rows = [("60", "m", 0, "itl_mean", 17.0, 18.0), ("60", "m", 1, "itl_mean", 18.75, 21.5),
            ("60", "m", 0, "ttft_mean", 50.0, 50.0), ("60", "m", 1, "ttft_mean", 53.5, 50.0),
            ("66", "m", 0, "itl_mean", 7.0, 7.0)]  # one rate: no slope
    s = runfit.load_slopes(table(rows), runfit.stage_rates(suite)).set_index("metric")
    assert list(s["run"]) == ["60", "60"]
    assert s.loc["itl_mean", "measured"] == pytest.approx(0.5) and s.loc["itl_mean", "simulated"] == pytest.approx(1.0)
    assert s.loc["itl_mean", "error_pct"] == pytest.approx(100.0)
    assert s.loc["ttft_mean", "simulated"] == pytest.approx(0.0) and s.loc["ttft_mean", "error_pct"] == pytest.approx(-100.0)


def test_start_values_are_the_configured_or_the_model_defaults():
    from distsim.instance.latency.roofline3 import DEFAULTS

    got = runfit.start_values(["cluster.latency.kind=roofline3", "cluster.frontend.request_us=10"])
    assert got["cluster.latency.step_overhead_us"] == DEFAULTS.step_overhead_us
    assert got["cluster.frontend.request_us"] == 10.0


@pytest.mark.skipif(not RUNS.is_dir(), reason=f"{RUNS} is absent")
def test_fit_on_two_short_runs_lowers_the_objective():
    suite = read_suite(RUNS)
    over = ["cluster.latency.kind=roofline3", "workload.num_requests=150"]
    with ReplayPool(over, workers=1) as pool:
        runs = runfit.Runs.of_suite(suite, pool, ["66", "67"])
        start = {**runfit.start_values(over), "cluster.latency.step_overhead_us": 3000.0}
        fit = runfit.fit(runs, start, iterations=1)
    assert fit.best.objective <= fit.start.objective
    assert np.isfinite(fit.jacobian).all() and fit.evaluations >= 1 + len(runfit.DEFAULT_TERMS)


class AnalyticRuns:
    """Runs whose residuals are a known function of the terms (no replay): one run, three figures."""

    def __init__(self, residual_of):
        self.residual_of, self.runs, self.evaluations = residual_of, [], 0

    def score(self, values, runs=None):
        self.evaluations += 1
        res = np.asarray(self.residual_of(values), dtype=float)
        return runfit.Scored(dict(values), pd.DataFrame(), res, float(res @ res))


MEM, LAYER, REQ = "cluster.latency.memory_efficiency", "cluster.latency.layer_overhead_us", "cluster.frontend.request_us"


def test_prior_holds_what_the_runs_cannot_see_and_warns_by_name():
    """Residuals that see memory_efficiency alone (a 10% miss that 0.72 would fix): it moves most of the
    way (the prior pulls it back a little), layer_overhead_us stays on its prior and is named as not
    pinned; a term the runs push past its bound is named with the bound."""
    def residual_of(v):
        miss = 0.72 / v[MEM] - 1.0  # relative error of a bandwidth-bound figure
        return [miss, miss, miss - v[REQ] / 1e5]

    runs = AnalyticRuns(residual_of)
    start = {MEM: 0.7942, LAYER: 31.58, REQ: 0.0}
    fit = runfit.fit(runs, start, iterations=4, terms=[MEM, LAYER, REQ], sd=runfit.PRIOR_SD)
    got = fit.best.values
    assert 0.72 < got[MEM] < 0.7942 and abs(got[MEM] - 0.72) < 0.3 * (0.7942 - 0.72)
    assert got[LAYER] == pytest.approx(31.58)
    assert fit.best.objective < fit.start.objective
    text = "\n".join(fit.warnings)
    assert f"{LAYER} is not pinned" in text and f"{MEM} is not pinned" not in text
    assert f"{REQ} ended on its lower bound" in text  # the runs want a negative front-end time
    ident = fit.identifiability
    assert ident[LAYER]["data_sd"] == math.inf and ident[LAYER]["sd"] == pytest.approx(ident[LAYER]["prior_sd"])
    assert ident[MEM]["sd"] < 0.5 * ident[MEM]["prior_sd"]


def test_a_measured_gpu_term_has_the_tighter_prior():
    """The H100's GPU terms are pinned by its step tables, a datasheet GPU's are not; the RTX 4090's
    catalog values come from a run of it."""
    h100 = runfit.prior_sd([MEM, REQ], "H100")
    l40s = runfit.prior_sd([MEM, REQ], "L40S")
    ada = runfit.prior_sd([MEM, LAYER], "RTX4090")
    assert h100[MEM] == runfit.MEASURED_SD[MEM] < l40s[MEM] == runfit.PRIOR_SD[MEM]
    assert h100[REQ] == l40s[REQ] == runfit.PRIOR_SD[REQ]  # a serving term: the user's own host
    assert ada[MEM] == runfit.MEASURED_SD[MEM] and ada[LAYER] == runfit.PRIOR_SD[LAYER]


def test_start_values_take_the_gpu_catalog_achieved_terms():
    from distsim.catalog.hardware import load_hardware
    from distsim.instance.latency.roofline3 import DEFAULTS

    ada = dict(load_hardware("RTX4090").achieved)
    got = runfit.start_values(["cluster.latency.kind=roofline3"], "RTX4090")
    assert got[MEM] == ada["memory_efficiency"] != DEFAULTS.memory_efficiency
    assert runfit.start_values(["cluster.latency.kind=roofline3"], "L40S")[MEM] == DEFAULTS.memory_efficiency


def test_default_terms_leave_a_step_fitted_gpu_to_its_tables():
    """By default a runs fit moves the GPU terms only of a GPU without its own step fit, on runs of that
    one GPU: the H100's are its step tables' (one run's few-percent miss is the model's, not the GPU's)."""
    from distsim.calibrate.cli import _default_terms

    gpu = set(runfit.GPU_TERMS)
    assert runfit.steps_measured("H100") and not runfit.steps_measured("RTX4090")
    assert MEM in _default_terms(None, False) and REQ in _default_terms(None, False)
    assert not set(_default_terms(None, True)) & gpu and REQ in _default_terms(None, True)
    assert not set(_default_terms("step_fit.json", False)) & gpu
