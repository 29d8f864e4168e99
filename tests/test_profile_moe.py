"""A mixture-of-experts model in the profiler (distsim/profile/forward.py, micro.py): the numpy
backend's run of a tiny Mixtral-shaped model (tests/fixtures/profile/tiny-mixtral.json) writes the step
table in the layout of ../shared/data/h100_steps's MoE tables (their columns and ``moe_impl``) and the
MoE operator table (router, top-k, expert GEMMs by rows per expert), which ``calibrate steps`` reads
with the model's experts and fits; the expert loop computes the MoE FFN a per-token loop computes; the
routing is a fixed uniform draw; the catalog's Mixtral and Qwen3-MoE plan within the budget on an H100;
the torch backend where torch is installed."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clikit import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim.catalog import load_hardware, load_model
from distsim.fidelity.steps import cli as steps_cli
from distsim.fidelity.steps.compare import latency_settings
from distsim.fidelity.steps.data import REQUIRED, read_steps
from distsim.instance.latency.base import StepShape
from distsim.profile import cli
from distsim.profile.backends.numpy_backend import NumpyBackend
from distsim.profile.forward import DenseForward, dispatch, routing, shard_of
from distsim.profile.grid import FULL, TINY, planned_seconds, steps_of

TINY_MOE = str(ROOT / "tests" / "fixtures" / "profile" / "tiny-mixtral.json")
FAST = ["--backend", "numpy", "--grid", "tiny", "--target-ms", "1"]
H100_MOE_COLUMNS = pd.read_csv(ROOT.parent / "shared" / "data" / "h100_steps" / "qwen3-30b-a3b.csv", nrows=1).columns


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("moe")
    assert cli.main(["--model", TINY_MOE, *FAST, "--out", str(out)]) == 0
    return out


def test_the_moe_profile_is_in_the_h100_moe_tables_layout(profiled):
    table = pd.read_csv(profiled / "tiny-mixtral.csv")
    shared = {"model", "kind", "batch", "tokens", "context", "prefill_tokens", "decode_tokens", "measured_ms", "p10_ms",
              "p90_ms", "repetitions", "prefill_seqs", "prefill_context", "prefill_attn_pairs", "prefill_kv_tokens",
              "decode_ctx_total", "cuda_graph", "moe_impl", "layers_measured"}
    assert shared <= set(H100_MOE_COLUMNS) and shared | set(REQUIRED) <= set(table.columns)
    assert len(table) == len(steps_of(TINY)) and (table["moe_impl"] == "expert_loop").all() and (table["measured_ms"] > 0).all()
    moe = pd.read_csv(profiled / "micro_moe_tiny-mixtral.csv")
    assert set(moe["op"]) == {"router", "topk", "expert_gate_up", "expert_down"}
    assert set(moe["tokens"]) == set(TINY.gemm_rows) and (moe["experts"] == 4).all() and (moe["top_k"] == 2).all()
    assert np.allclose(moe["rows_per_expert"], moe["tokens"] * 2 / moe["active_experts"])
    assert (moe["max_rows_per_expert"] <= moe["tokens"]).all()  # an expert gets each token at most once
    gate_up = moe[moe["op"] == "expert_gate_up"]
    assert (gate_up["k"] == 128).all() and (gate_up["n"] == 2 * 256).all() and (gate_up["m"] == gate_up["tokens"] * 2).all()
    gemm = pd.read_csv(profiled / "micro_gemm_tiny-mixtral.csv")
    assert set(gemm["gemm"]) == {"qkv", "o", "router", "expert_gate_up", "expert_down", "lm_head"}
    assert "micro_moe_tiny-mixtral.csv" in (profiled / "README.md").read_text()


def test_calibrate_steps_reads_the_moe_profile_with_its_experts_and_fits_it(profiled, tmp_path):
    (table,) = read_steps(profiled)
    assert table.model.is_moe and table.model.num_experts == 4 and table.model.experts_per_token == 2
    assert table.model.moe_intermediate_size == 256 and table.model.dtype_bytes == 4
    assert steps_cli.main([str(profiled), "--fit", "--out", str(tmp_path)]) == 0
    fit = json.loads((tmp_path / "step_fit.json").read_text())
    assert fit["fitted_on"] == ["tiny-mixtral"] and fit["objective"] <= fit["start_objective"]
    assert "expert_compute_efficiency" not in fit["unused"]  # the expert GEMMs moved the fit


def test_the_expert_loop_computes_the_moe_ffn():
    b = NumpyBackend()
    shard = shard_of(load_model(TINY_MOE), 1, 1, 4)
    fwd = DenseForward(b, shard)
    tokens = 24
    h = b.randn((tokens, shard.hidden))
    layer = fwd.layers[0]
    got = fwd.moe_ffn(tokens)(h, layer)
    chosen = routing(tokens, shard.experts, shard.top_k)
    _, weights = b.topk(h @ layer[2], shard.top_k)
    want = np.zeros_like(h)
    for t in range(tokens):  # each token through its experts, one at a time
        for j, e in enumerate(chosen[t]):
            want[t] += weights[t, j] * b.silu_mul(h[t : t + 1] @ layer[3][e])[0] @ layer[4][e]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 16), st.data())
def test_the_dispatch_is_a_stable_expert_order_of_every_pair(tokens, experts, data):
    k = data.draw(st.integers(1, experts))
    chosen = routing(tokens, experts, k)
    assert chosen.shape == (tokens, k) and all(len(set(row)) == k for row in chosen.tolist())  # distinct experts
    assert np.array_equal(chosen, routing(tokens, experts, k))  # a fixed draw
    d = dispatch(chosen, experts)
    flat = chosen.reshape(-1)
    assert sorted(d.order) == list(range(tokens * k)) and sum(d.rows_per_expert) == tokens * k
    for e, lo, hi in d.spans:
        pairs = d.order[lo:hi]
        assert all(flat[p] == e for p in pairs) and pairs == sorted(pairs)  # stable within an expert
    assert [d.order[i] for i in d.inverse] == list(range(tokens * k))


def test_the_catalog_moe_models_plan_within_ten_minutes_on_an_h100():
    """The full grid's planned timing (each step's time from the datasheet step model, as
    tests/test_profile.py plans the dense models): Mixtral-8x7B's first 8 layers (as the H100 tables)
    and Qwen3-30B-A3B whole, at TP 1."""
    s = latency_settings(())
    for model, layers in (("mixtral-8x7b", 8), ("qwen3-30b-a3b", 48)):
        spec = load_model(model)
        spec = dataclasses.replace(spec, num_layers=layers, num_moe_layers=layers)
        shard_of(spec, 1, layers, 2)  # the profiler builds it
        lm = s.build(spec, {}, load_hardware("H100"), 1)
        us = []
        for step in steps_of(FULL):
            c = step.shape_columns()
            us.append(lm.kernel_us(StepShape(c["prefill_tokens"], c["prefill_attn_pairs"], c["prefill_kv_tokens"], c["decode_tokens"], c["decode_ctx_total"], c["prefill_seqs"])))
        assert 0 < planned_seconds(us, 0.2) < 600 / 4, model


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the profile extra)")
def test_the_torch_backend_profiles_the_moe_layout(tmp_path):
    assert cli.main(["--model", TINY_MOE, "--backend", "torch", "--grid", "tiny", "--target-ms", "1", "--out", str(tmp_path)]) == 0
    (table,) = read_steps(tmp_path)
    assert table.model.is_moe
    frame = pd.read_csv(tmp_path / "tiny-mixtral.csv")
    assert (frame["backend"] == "torch").all() and (frame["moe_impl"] == "expert_loop").all()
    assert set(pd.read_csv(tmp_path / "micro_moe_tiny-mixtral.csv")["op"]) == {"router", "topk", "expert_gate_up", "expert_down"}
