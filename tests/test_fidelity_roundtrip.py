"""Runs produced by distsim itself: validation finds zero error, calibration recovers the coefficients
that made them, and the two commands write what they promise."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.calibrate import calibrate
from distsim.calibrate import main as calibrate_main
from distsim.fidelity.csv_format import write_csv_run
from distsim.fidelity.fit import fit
from distsim.fidelity.metrics import METRICS
from distsim.fidelity.readers import read_run
from distsim.fidelity.run import EngineSettings
from distsim.instance.latency.profile import read_profile
from distsim.request import Request
from distsim.validate import main as validate_main
from distsim.validate import validate

TRUTH = {"base_us": 2000.0, "per_prefill_token_us": 1.5, "per_decode_token_us": 200.0}
ENGINE = EngineSettings(  # max_model_len as a vLLM run records it: 5000 blocks hold 80,000 tokens, not a 131,072 context
    max_num_seqs=16, max_num_batched_tokens=512, total_kv_blocks=5000, enable_prefix_caching=False, max_model_len=8192,
    # synchronous: with async scheduling a request's first token waits one more step, which ties mean TTFT to
    # the decode step, and from the start below the fit lands on another point of nearly the same error
    # (base 2227 us, 169 us per decode token): this test is about the fit recovering a model, not about that
    async_scheduling=False,
)


# the synthetic run is an engine-side trace (its first request's queue time is its arrival, as the bench
# reader aligns clocks), so no front-end time sits between arrival and engine
NO_FRONT_END = ["cluster.frontend.request_us=0", "cluster.frontend.per_input_token_us=0", "cluster.frontend.per_output_token_us=0"]


def linear_overrides(coefs: dict[str, float]) -> list[str]:
    return ["cluster.latency.kind=linear", *NO_FRONT_END] + [f"cluster.latency.{k}={v}" for k, v in coefs.items()]


def synthetic_requests(n: int = 120, seed: int = 7) -> list[Request]:
    """Poisson arrivals at 12.5 req/s, varied lengths: a few requests batched, short queues."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(0.08, n)
    arrivals = np.rint(np.cumsum(gaps) * 1e6).astype(int) - int(gaps[0] * 1e6)
    prompts = rng.integers(20, 1500, n)
    outputs = rng.integers(20, 180, n)
    return [Request(i, int(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A CSV run: what distsim simulates with the TRUTH coefficients on an H100 running Llama-3.1-8B."""
    overrides = ["cluster.instances=1", "cluster.hardware=H100", "cluster.model=llama-3.1-8b"]
    overrides += [f"{k}={v}" for k, v in ENGINE.overrides().items()] + linear_overrides(TRUTH)
    result = simulate(load_config(overrides), requests=synthetic_requests())
    assert (result.requests["status"] == "completed").all()
    folder = tmp_path_factory.mktemp("synthetic")
    return write_csv_run(folder, result.requests, model="llama-3.1-8b", hardware="H100", engine=ENGINE)


def test_validate_on_a_distsim_run_recovers_zero_error(synthetic_run):
    v = validate(synthetic_run, linear_overrides(TRUTH))
    assert set(v.comparison) == set(METRICS)
    for metric, c in v.comparison.items():
        assert abs(c.error_pct) < 1e-9, metric
    # and a different model is visibly off
    off = validate(synthetic_run, linear_overrides({**TRUTH, "per_decode_token_us": 300.0}))
    assert off.comparison["tpot_ms.mean"].error_pct > 5


def test_calibration_recovers_the_linear_coefficients(synthetic_run):
    """From a start 30% off in every coefficient (the default start, the catalog roofline turned
    linear, is a factor 3-20 off here and needs a larger budget)."""
    run = read_run(synthetic_run)
    start = {"base_us": 2600.0, "per_prefill_token_us": 1.0, "per_decode_token_us": 260.0}
    result = fit([run], "linear", NO_FRONT_END, budget=150, start=start)
    for name, true in TRUTH.items():
        assert result.coefficients[name] == pytest.approx(true, rel=0.03), (name, result.coefficients)
    assert result.objective < 0.02 < 0.3 < result.start_objective


def test_calibrate_describes_the_fit_as_a_profile(synthetic_run):
    cal = calibrate([read_run(synthetic_run)], "linear", budget=20, name="synthetic")
    p = cal.profile
    assert p.name == "synthetic" and p.kind == "linear" and set(p.coefficients) == set(TRUTH)
    assert p.fitted_on == {"model": "llama-3.1-8b", "hardware": "H100", "tensor_parallel_size": 1}
    run_info = p.provenance["runs"][0]
    assert run_info["requests"] == 120 and len(run_info["sha256"]) == 64
    (errors,) = p.provenance["errors_pct"].values()
    assert set(errors) == set(METRICS)


def test_validate_cli_writes_json_and_plots(synthetic_run, tmp_path, capsys):
    out = tmp_path / "out"
    code = validate_main([str(synthetic_run), *linear_overrides(TRUTH), "--out", str(out)])
    assert code == 0
    data = json.loads((out / "validation.json").read_text())
    assert set(data) == set(METRICS)
    assert set(data["ttft_ms.p99"]) == {"measured", "simulated", "error_pct"}
    assert data["e2e_ms.mean"]["error_pct"] == 0
    assert (out / "validation_latency.png").stat().st_size > 0
    assert (out / "validation_occupancy.png").stat().st_size > 0
    assert "TTFT p99" in capsys.readouterr().out


def test_validate_cli_reports_a_bad_run_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens,first_token_s,last_token_s\n0,5,5,1,x\n")
    assert validate_main([str(bad), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:2:" in err


def test_calibrate_cli_writes_a_loadable_profile(synthetic_run, tmp_path):
    out = tmp_path / "p.json"
    code = calibrate_main([str(synthetic_run), "--model", "linear", "--budget", "40", "--out", str(out)])
    assert code == 0
    profile = read_profile(out)
    assert profile.kind == "linear" and set(profile.coefficients) == set(TRUTH)
    assert profile.provenance["evaluations"] <= 40
    v = validate(synthetic_run, [f"cluster.latency.profile={out}"])
    assert np.isfinite(v.comparison["e2e_ms.mean"].error_pct)


def test_calibrate_fits_the_shipped_model_by_default(synthetic_run, tmp_path):
    """A user's own run calibrates roofline3 (the shipped model): its GPU rates and per-layer time
    fitted, every other term written at its shipped value; the profile loads and replays."""
    from distsim.instance.latency.roofline3 import Roofline3Coefficients

    out = tmp_path / "r3.json"
    assert calibrate_main([str(synthetic_run), "--budget", "6", "--out", str(out)]) == 0
    profile = read_profile(out)
    assert profile.kind == "roofline3"
    assert set(profile.coefficients) == {f.name for f in dataclasses.fields(Roofline3Coefficients)}
    v = validate(synthetic_run, [f"cluster.latency.profile={out}"])
    assert np.isfinite(v.comparison["e2e_ms.mean"].error_pct)
