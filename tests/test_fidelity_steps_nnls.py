"""The bounded linear least-squares fit of the per-operator step model (distsim.fidelity.steps.nnls):
it recovers the coefficients that made synthetic steps, keeps coefficients no row moves, and the CLI
writes the fit and its leave-one-model-out table."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from stepkit import FIXTURE, SETTINGS

from distsim.fidelity.steps import cli as steps_cli
from distsim.fidelity.steps.compare import latency_settings, simulate
from distsim.fidelity.steps.data import read_steps
from distsim.fidelity.steps.nnls import fit_basis, group_weights, lomo, values_of
from distsim.instance.latency.roofline3 import DEFAULTS

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_steps"


def synthetic(tables, truth):
    made = simulate(tables, latency_settings(SETTINGS), truth)
    out, at = [], 0
    for t in tables:
        out.append(dataclasses.replace(t, rows=t.rows.assign(measured_us=made[at : at + len(t.rows)])))
        at += len(t.rows)
    return out


def test_weights_count_each_model_and_class_equally():
    tables = read_steps(FIXTURE)
    w = group_weights(tables)
    assert w.sum() == pytest.approx(1.0)
    assert w[:6].sum() == pytest.approx(1 / 3)  # Llama's six rows: one model of three


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent")
def test_fit_recovers_the_coefficients_that_made_the_steps():
    tables = read_steps(SHARED)
    truth = {
        "compute_efficiency": 0.6, "gemm_half_tokens": 120.0, "expert_compute_efficiency": 0.7,
        "expert_half_rows": 150.0, "attention_efficiency": 0.5, "memory_efficiency": 0.85,
        "activation_bytes_hidden": 20.0, "activation_bytes_intermediate": 10.0, "activation_bytes_routed": 30.0,
        "layer_overhead_us": 15.0, "moe_layer_overhead_us": 40.0,
    }
    fit = fit_basis(synthetic(tables, truth), latency_settings(SETTINGS), DEFAULTS)
    got = values_of(fit.coefficients)
    for key, value in truth.items():
        assert got[key] == pytest.approx(value, rel=0.02), key
    assert fit.objective < 1e-8 < fit.start_objective and not fit.unused


def test_dense_tables_leave_the_expert_terms_at_their_start():
    tables = [t for t in read_steps(FIXTURE) if not t.moe]
    fit = fit_basis(tables, latency_settings(SETTINGS), DEFAULTS)
    assert set(fit.unused) == {"inv_cee", "he_inv_cee", "act_r", "moe_layer"}
    assert fit.coefficients.expert_half_rows == pytest.approx(DEFAULTS.expert_half_rows)
    assert fit.objective <= fit.start_objective


def test_leave_one_model_out_scores_each_model_at_the_others_fit():
    tables = read_steps(FIXTURE)
    result = lomo(tables, latency_settings(SETTINGS), DEFAULTS)
    assert list(result.fits) == ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"]
    assert len(result.steps) == sum(len(t.rows) for t in tables)
    assert list(result.steps["model"].unique()) == [t.name for t in tables]


def test_cli_nnls_writes_the_fit_and_lomo(tmp_path, capsys):
    out = tmp_path / "out"
    assert steps_cli.main([str(FIXTURE), *SETTINGS, "--nnls", "--lomo", "--out", str(out)]) == 0
    fit = json.loads((out / "step_fit.json").read_text())
    assert set(fit["values"]) >= {"compute_efficiency", "memory_efficiency", "layer_overhead_us"}
    assert set(fit["lomo"]) == {"llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"}
    assert len(pd.read_csv(out / "steps_lomo.csv")) == 12
    md = capsys.readouterr().out
    assert "## Leave one model out" in md and "bounded linear least squares" in md
    assert steps_cli.main([str(FIXTURE), "cluster.latency.kind=roofline", "--nnls"]) == 2  # no linear basis
    assert "roofline3" in capsys.readouterr().err
