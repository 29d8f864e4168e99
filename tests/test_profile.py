"""The profiler (python -m distsim.profile) without a GPU and without torch: the numpy backend's real
timings of a tiny Llama-shaped model (tests/fixtures/profile/tiny-llama.json) written in the step
tables' layout, read back by calibrate steps with the model config and the device the profile names,
and fitted; the fit path recovers steps made by known coefficients exactly; the full grid's planned
cost fits the ten-minute budget; bad input is one line and exit 2; the torch backend where torch is
installed (skipped where not: torch is no test dependency)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clikit import ROOT, assert_user_error, run_module

from distsim.catalog import load_hardware, load_model
from distsim.fidelity.steps import cli as steps_cli
from distsim.fidelity.steps.compare import latency_settings, simulate
from distsim.fidelity.steps.data import REQUIRED, read_steps
from distsim.fidelity.steps.nnls import fit_basis, values_of
from distsim.instance.latency.base import StepShape
from distsim.instance.latency.roofline3 import DEFAULTS
from distsim.profile import cli
from distsim.profile.forward import Step
from distsim.profile.grid import FULL, TINY, planned_seconds, steps_of

TINY_MODEL = str(ROOT / "tests" / "fixtures" / "profile" / "tiny-llama.json")
FAST = ["--backend", "numpy", "--grid", "tiny", "--target-ms", "1"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile")
    assert cli.main(["--model", TINY_MODEL, *FAST, "--out", str(out)]) == 0
    return out


def test_the_profile_is_in_the_step_tables_layout(profiled):
    table = pd.read_csv(profiled / "tiny-llama.csv")
    assert set(REQUIRED) | {"gpu", "tp", "layers_measured", "measured_ms"} <= set(table.columns)
    assert len(table) == len(steps_of(TINY))
    assert (table["measured_ms"] > 0).all() and (table["p10_ms"] <= table["p90_ms"]).all()
    for row, step in zip(table.itertuples(), steps_of(TINY)):  # the shape columns of the step that ran
        assert row.kind == step.kind
        assert row.prefill_attn_pairs == sum(n * c + n * (n + 1) // 2 for n, c in step.chunks)
        assert row.decode_ctx_total == row.decode_tokens * row.context
        assert row.tokens == row.prefill_tokens + row.decode_tokens
    manifest = json.loads((profiled / "profile.json").read_text())
    assert manifest["tables"] == {"tiny-llama": "models/tiny-llama.json"}
    assert manifest["device"]["matmul_tflops"] > 0 and manifest["device"]["copy_tbps"] > 0
    config = json.loads((profiled / "models" / "tiny-llama.json").read_text())
    assert config["torch_dtype"] == "float32" and config["hidden_size"] == 128  # as measured
    gemm = pd.read_csv(profiled / "micro_gemm_tiny-llama.csv")
    assert set(gemm["gemm"]) == {"qkv", "o", "gate_up", "down", "lm_head"}
    assert gemm.loc[gemm["gemm"] == "qkv", "n"].iloc[0] == (4 + 2 * 2) * 32  # per-GPU QKV width
    attention = pd.read_csv(profiled / "micro_attention_tiny-llama.csv")
    assert set(attention["kv_heads"]) >= set(TINY.attention_kv_heads)
    sampler = pd.read_csv(profiled / "micro_sampler_tiny-llama.csv")
    assert set(sampler["path"]) == {"greedy", "temperature"} and 1024 in set(sampler["vocab"])


def test_calibrate_steps_reads_the_profile_with_its_model_and_device(profiled):
    (table,) = read_steps(profiled)
    assert table.model.hidden_size == 128 and table.model.dtype_bytes == 4  # the config beside it
    manifest = json.loads((profiled / "profile.json").read_text())["device"]
    assert table.device is not None and table.gpu().bf16_tflops == manifest["matmul_tflops"]  # measured peaks
    assert table.gpu().hbm_bw_tbps == manifest["copy_tbps"]


def test_calibrate_steps_fits_the_profiled_device(profiled, tmp_path):
    assert steps_cli.main([str(profiled), "--fit", "--out", str(tmp_path)]) == 0
    fit = json.loads((tmp_path / "step_fit.json").read_text())
    assert fit["fitted_on"] == ["tiny-llama"]
    assert fit["objective"] <= fit["start_objective"]
    assert 0 < fit["values"]["compute_efficiency"] <= 1 and 0 < fit["values"]["memory_efficiency"] <= 1


def test_the_fit_recovers_steps_made_by_known_coefficients(profiled):
    """The layout and the fit path exactly: steps priced by the step model at known GPU terms on the
    profiled device are fitted back to them (zero error)."""
    settings = latency_settings(())
    (table,) = read_steps(profiled)
    truth = {"compute_efficiency": 0.41, "memory_efficiency": 0.33, "attention_efficiency": 0.12, "layer_overhead_us": 9.0}
    made = dataclasses.replace(table, rows=table.rows.assign(measured_us=simulate([table], settings, truth)))
    fit = fit_basis([made], settings, DEFAULTS)
    assert fit.objective < 1e-6  # typical error under 0.1%: the made steps, priced back (the tiny table
    # cannot tell every term apart: activation bytes per token trade against the bandwidth)
    again = simulate([made], settings, values_of(fit.coefficients))
    np.testing.assert_allclose(again, made.rows["measured_us"], rtol=1e-3)


def test_fewer_layers_are_compared_with_the_model_cut_to_them(tmp_path):
    assert cli.main(["--model", TINY_MODEL, *FAST, "--layers", "1", "--no-operators", "--out", str(tmp_path)]) == 0
    (table,) = read_steps(tmp_path)
    assert table.name == "tiny-llama-1layers" and table.model.num_layers == 1
    assert "1 of 2 layers measured" in table.note
    assert not list(tmp_path.glob("micro_gemm_*.csv"))


def test_the_full_grid_plans_within_ten_minutes_on_one_gpu():
    """The full grid's timing budget, each step's time from the datasheet step model (a plan, not a
    clock): an 8B model at TP 1 on an H100 and on an RTX 4090, the per-GPU shapes of a 70B model at TP 4
    (8 of its layers, as the H100 tables) on an H100."""
    settings = latency_settings(())
    for model, gpu, tp, layers in (("llama-3.1-8b", "H100", 1, 32), ("llama-3.1-8b", "RTX4090", 1, 32), ("llama-3.1-70b", "H100", 4, 8)):
        spec = dataclasses.replace(load_model(model), num_layers=layers)
        lm = settings.build(spec, {}, load_hardware(gpu), tp)
        us = []
        for step in steps_of(FULL):
            c = step.shape_columns()
            shape = StepShape(c["prefill_tokens"], c["prefill_attn_pairs"], c["prefill_kv_tokens"], c["decode_tokens"], c["decode_ctx_total"], c["prefill_seqs"])
            us.append(lm.kernel_us(shape))
        planned = planned_seconds(us, 0.2)
        assert 0 < planned < 600 / 4, (model, gpu, planned)  # a quarter of the budget: room for a slower GPU


def test_a_step_knows_its_shape_columns():
    step = Step("prefill_ctx", ((512, 2048),))
    c = step.shape_columns()
    assert c["prefill_attn_pairs"] == 512 * 2048 + 512 * 513 // 2 and c["prefill_kv_tokens"] == 2560
    assert c["prefill_context"] == 2048 and c["context"] == 2048 and c["batch"] == 1
    mixed = Step("mixed", ((256, 0),), 16, 1024).shape_columns()
    assert mixed["tokens"] == 272 and mixed["decode_ctx_total"] == 16 * 1024 and mixed["batch"] == 17


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", TINY_MODEL, "--backend", "nope"], "nope"),
        (["--model", "deepseek-v2-lite", "--backend", "numpy"], "dense and all-MoE models only, not mixture-of-experts with dense layers, shared experts, latent attention"),
        (["--model", TINY_MODEL, "--backend", "numpy", "--tp", "3"], "--tp 3"),
        (["--model", "no-such-model", "--backend", "numpy"], "no-such-model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    assert cli.main([*args, "--grid", "tiny", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distsim.profile: ") and needle in err[0], err


def test_without_torch_the_torch_backend_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert cli.main(["--model", TINY_MODEL, "--grid", "tiny", "--out", str(tmp_path)]) == 2
    assert "pip install 'distsim[profile]'" in capsys.readouterr().err


def test_a_manifest_naming_a_missing_table_is_one_line(profiled, tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    manifest = json.loads((profiled / "profile.json").read_text())
    (folder / "profile.json").write_text(json.dumps(manifest))
    proc = run_module("distsim.calibrate", "steps", str(folder))
    assert_user_error(proc, 2, "tiny-llama.csv")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the profile extra)")
def test_the_torch_backend_profiles_the_same_layout(tmp_path):
    assert cli.main(["--model", TINY_MODEL, "--backend", "torch", "--grid", "tiny", "--target-ms", "1", "--no-operators", "--out", str(tmp_path)]) == 0
    (table,) = read_steps(tmp_path)
    frame = pd.read_csv(tmp_path / "tiny-llama.csv")
    assert (frame["backend"] == "torch").all() and np.all(frame["measured_ms"] > 0)
    assert table.model.num_layers == 2
