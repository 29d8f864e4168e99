"""Step-level error of the step model on measured engine steps, and the step-level fit
(distsim.fidelity.steps). Runs on a fixture of real rows (tests/fixtures/fidelity_steps), and on the
whole ../shared/data/h100_steps when it is beside the repo."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stepkit import FIXTURE

from distsim.catalog import load_model
from distsim.errors import InputFileError, UserError
from distsim.fidelity.steps import cli as steps_cli
from distsim.fidelity.steps import data as steps_data
from distsim.fidelity.steps.compare import STEP_COLUMNS, compare, latency_settings, simulate, summary
from distsim.fidelity.steps.data import cut_layers, read_steps, step_class
from distsim.fidelity.steps.fit import fit_steps, row_weights
from distsim.instance.latency import roofline

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_steps"


def test_reads_the_primary_tables_with_shapes_and_classes():
    tables = {t.name: t for t in read_steps(FIXTURE)}
    assert list(tables) == ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b-8layers"]
    llama = tables["llama-3.1-8b"]
    assert llama.rows["class"].tolist() == [
        "decode",
        "long context",
        "prefill",
        "prefill",
        "long context",
        "mixed",
    ]
    assert llama.shapes()[3] == (2048, 525312, 2048, 0, 0, 4)  # 2048 tokens over 4 prefill chunks
    assert llama.shapes()[5] == (256, 32896, 256, 64, 65536, 1)
    assert llama.rows["measured_us"].iloc[0] == pytest.approx(6479.5)
    assert not llama.moe and llama.note == ""
    mixtral = tables["mixtral-8x7b-8layers"]
    assert mixtral.moe and mixtral.model.num_layers == 8 and "cut to 8" in mixtral.note


def test_step_classes():
    assert step_class("decode", 128) == step_class("decode", 2048) == "decode"
    assert step_class("decode", 8192) == step_class("prefill_ctx", 2048) == "long context"
    assert (step_class("prefill", 0), step_class("mixed", 1024), step_class("other", 0)) == (
        "prefill",
        "mixed",
        None,
    )


def test_error_of_a_hand_computed_decode_row():
    """Llama-3.1-8B decode of one sequence at context 128 is memory-bound: every weight but the input
    embedding plus 128 tokens of KV, at 0.8 x 3.35 TB/s."""
    tables = read_steps(FIXTURE)[:1]
    m = load_model("llama-3.1-8b")
    weights = m.weight_bytes_per_gpu(1) - m.embed_params * 2  # 15,009,849,344 bytes
    kv = 32 * 2 * 8 * 128 * 2 * 128  # layers x (K, V) x kv heads x head dim x bf16 x tokens
    expected = (weights + kv) / (3.35e12 * 0.8) * 1e6
    plain = [
        "cluster.latency.kind=roofline", "cluster.latency.memory_efficiency=0.8", "cluster.latency.layer_overhead_us=0",
        "cluster.latency.gemm_half_tokens=0",
    ]
    row = compare(tables, simulate(tables, latency_settings(plain))).iloc[0]
    assert row.simulated_us == pytest.approx(expected, rel=1e-12) == pytest.approx(5606.95, abs=0.01)
    assert (
        row.error_pct == pytest.approx((expected - 6479.5) / 6479.5 * 100) == pytest.approx(-13.466, abs=1e-3)
    )
    halved = compare(tables, simulate(tables, latency_settings([*plain, "cluster.latency.memory_efficiency=0.4"])))
    assert halved.simulated_us.iloc[0] == pytest.approx(2 * expected, rel=1e-12)


def test_summary_per_model_class_and_overall():
    frame = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b"],
            "class": ["decode", "decode", "mixed", "prefill"],
            "error_pct": [10.0, -20.0, 5.0, -1.0],
        }
    )
    got = summary(frame).set_index(["model", "class"])
    assert got.loc[("a", "decode")].tolist() == [2, -5.0, 15.0, 20.0]
    assert got.loc[("a", "all")].tolist() == [3, -5.0 / 3, 35.0 / 3, 20.0]
    assert got.loc[("all", "all")].tolist() == [4, -1.5, 9.0, 20.0]


def test_cut_model_keeps_the_vocabulary_and_a_share_of_the_layers(monkeypatch):
    full = load_model("mixtral-8x7b")
    cut = cut_layers(full, 8)
    outside = (full.embed_params + full.lm_head_params + full.final_norm_params) * 2
    assert cut.weight_bytes_per_gpu(1) == pytest.approx(
        outside + (full.weight_bytes_per_gpu(1) - outside) / 4, abs=1
    )
    assert cut.weight_bytes_per_gpu(1) / 2**30 == pytest.approx(22.1, abs=0.05)  # the README's 22.1 GiB built
    assert cut_layers(load_model("deepseek-v2-lite"), 8) is None  # a dense first layer: layers not alike
    monkeypatch.setattr(steps_data, "cut_layers", lambda model, layers: None)
    mixtral = read_steps(FIXTURE)[-1]
    assert mixtral.model.num_layers == 32 and "scaled_step_ms" in mixtral.note
    assert mixtral.rows["measured_us"].iloc[0] == pytest.approx(12911.1)


def test_weights_count_each_model_and_class_equally():
    tables = read_steps(FIXTURE)[:2]
    w = row_weights(tables)
    assert w.sum() == pytest.approx(1.0)
    # Llama: 4 classes (decode 1 row, long context 2, prefill 2, mixed 1), each a quarter of its half
    assert w[:6].tolist() == pytest.approx([1 / 8, 1 / 16, 1 / 16, 1 / 16, 1 / 16, 1 / 8])
    assert w[6:].tolist() == pytest.approx([1 / 6] * 3)


def test_fit_recovers_the_coefficients_that_made_the_steps():
    settings = latency_settings(["cluster.latency.kind=roofline"])
    tables = read_steps(FIXTURE)[:2]
    truth = {"compute_efficiency": 0.5, "memory_efficiency": 0.7}
    made = simulate(tables, settings, truth)
    synthetic, at = [], 0
    for t in tables:
        rows = t.rows.assign(measured_us=made[at : at + len(t.rows)])
        synthetic.append(dataclasses.replace(t, rows=rows))
        at += len(t.rows)
    fit = fit_steps(synthetic, settings, ["compute_efficiency", "memory_efficiency", "step_overhead_us"])
    k = roofline.DEFAULTS
    assert fit.start == {"compute_efficiency": k.compute_efficiency, "memory_efficiency": k.memory_efficiency}
    for key, value in truth.items():
        assert fit.values[key] == pytest.approx(value, rel=0.01)
    assert fit.objective < 1e-10 < fit.start_objective and fit.unused == ["step_overhead_us"]


def test_cli_compares_fits_with_a_held_out_model_and_writes(tmp_path, capsys):
    out = tmp_path / "out"
    rc = steps_cli.main(
        [
            str(FIXTURE),
            "--out",
            str(out),
            "--fit",
            "compute_efficiency,memory_efficiency",
            "--holdout",
            "qwen2.5-7b",
        ]
    )
    assert rc == 0
    table = pd.read_csv(out / "steps.csv")
    assert list(table.columns) == list(STEP_COLUMNS)
    assert len(table) == 12
    fit = json.loads((out / "step_fit.json").read_text())
    assert fit["fitted_on"] == ["llama-3.1-8b"] and fit["holdout"] == "qwen2.5-7b" and len(fit["rows"]) == 6
    assert set(fit["values"]) == {"compute_efficiency", "memory_efficiency"} and "--holdout" in fit["command"]
    md = (out / "steps.md").read_text()
    assert "qwen2.5-7b held out" in md and "## At the fitted values" in md
    assert "| all | all | 12 |" in capsys.readouterr().out


def _broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    folder = tmp_path / "steps"
    shutil.copytree(FIXTURE, folder)
    path = folder / "llama-3.1-8b.csv"
    path.write_text(path.read_text().replace(old, new, 1))
    return folder


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("6.4795", "fast", "'measured_ms' must be a positive number (got 'fast')"),
        (",prefill_ctx,", ",prefil,", "'kind' must be one of decode, prefill, prefill_ctx, mixed"),
        ("decode_ctx_total", "decode_ctx", "missing column(s) decode_ctx_total"),
    ],
)
def test_a_broken_table_is_one_line_naming_file_and_line(tmp_path, old, new, message):
    with pytest.raises(InputFileError) as err:
        read_steps(_broken_copy(tmp_path, old, new))
    assert message in str(err.value) and "llama-3.1-8b.csv:" in str(err.value)


def test_variant_tables_are_not_read(tmp_path):
    folder = _broken_copy(tmp_path, "", "")
    (folder / "llama-3.1-8b_attn-varlen.csv").write_text("not, a step table\n")
    assert [t.name for t in read_steps(folder)] == ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b-8layers"]


@pytest.mark.parametrize(
    "args",
    [
        ["/no/such/folder"],
        [str(FIXTURE), "cluster.latency.compute_efficiency=2"],
        [str(FIXTURE), "cluster.latency.no_such_key=1"],
        [str(FIXTURE), "--fit", "speed"],
        [str(FIXTURE), "--fit", "step_overhead_us"],
        [str(FIXTURE), "--fit", "compute_efficiency", "--holdout", "gpt-5"],
    ],
)
def test_bad_folder_override_or_fit_is_one_line_and_exit_2(args, capsys):
    assert steps_cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("distsim: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_latency_model_without_gpu_time_is_refused():
    settings = latency_settings(
        [
            "cluster.latency.kind=linear",
            "cluster.latency.base_us=1000",
            "cluster.latency.per_prefill_token_us=1",
            "cluster.latency.per_decode_token_us=1",
        ]
    )
    with pytest.raises(UserError, match="gpu_step_us"):
        simulate(read_steps(FIXTURE), settings)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent")
def test_the_whole_h100_folder():
    tables = read_steps(SHARED)
    names = [t.name for t in tables]
    assert names == [
        "llama-3.1-8b", "qwen2.5-7b", "qwen3-30b-a3b", "mixtral-8x7b-8layers", "llama-3.1-70b-tp4-8layers",
        "codellama-34b-tp2-8layers", "llama-4-scout-fp8-tp2-8layers", "llama-4-scout-bf16-tp2-8layers",
        "mixtral-8x7b-8layers (moe_skew)", "qwen3-30b-a3b (moe_skew)",
    ]
    # Qwen3's router-skewed prefills and Scout's chunked-attention rows left out (README corrections)
    assert [len(t.rows) for t in tables] == [56, 59, 5, 8, 98, 98, 33, 33, 49, 49]
    by = {t.name: t for t in tables}
    assert {t.hardware for t in tables} == {"H100"}  # gpu column ("NVIDIA H100 80GB HBM3") or the README
    assert (by["llama-3.1-70b-tp4-8layers"].tp, by["codellama-34b-tp2-8layers"].tp) == (4, 2)
    assert by["llama-4-scout-fp8-tp2-8layers"].model.fp8_matmuls
    assert not by["llama-4-scout-bf16-tp2-8layers"].model.fp8_matmuls
    assert sorted(set(by["qwen3-30b-a3b (moe_skew)"].skews())) == [0.0, 0.8, 1.2]
    assert by["llama-4-scout-bf16-tp2-8layers"].model_group == "llama-4-scout" == by["llama-4-scout-fp8-tp2-8layers"].model_group
    for kind in ("roofline", "roofline3"):
        settings = latency_settings([f"cluster.latency.kind={kind}"])
        errors = compare(tables, simulate(tables, settings))["error_pct"].to_numpy()
        assert np.isfinite(errors).all() and len(errors) == 488


def test_a_device_name_maps_to_the_catalog():
    from distsim.fidelity.steps.data import hardware_named

    assert hardware_named("NVIDIA H100 80GB HBM3") == "H100"
    assert hardware_named("NVIDIA H200") == "H200"
    assert hardware_named("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert hardware_named("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "RTXPRO6000"
    assert hardware_named("Tesla V100-SXM2-16GB") is None


def test_a_table_measured_on_another_gpu_is_compared_on_it(tmp_path):
    """The gpu column decides the GPU: the same steps on an H200 are simulated with its bandwidth."""
    folder = tmp_path / "steps"
    shutil.copytree(FIXTURE, folder)
    path = folder / "llama-3.1-8b.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",gpu", *(line + ",NVIDIA H200" for line in lines[1:])]) + "\n")
    tables = read_steps(folder)
    assert tables[0].hardware == "H200" and tables[1].hardware == "H100"
    h200 = simulate(tables[:1], latency_settings())
    h100 = simulate(read_steps(FIXTURE)[:1], latency_settings())
    decode = 0  # the first row decodes one sequence: memory-bound, 3.35 / 4.8 of the H100's time
    assert h200[decode] < 0.8 * h100[decode]
