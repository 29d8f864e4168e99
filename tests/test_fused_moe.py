"""vLLM's fused MoE in the serving layer (serving.fused_moe): its MoE layers launch FUSED_MOE_SHARE of the
per-MoE-layer kernels the step tables' PyTorch stand-in launches, on every TP shard; the kernels the tables
are compared with stay the stand-in's; dense models are untouched; a bad value is one line."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from distsim.catalog import load_hardware, load_model
from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.roofline3 import DEFAULTS, Roofline3Latency
from distsim.instance.latency.serving import (
    FUSED_MOE_EXTRA_KERNELS,
    FUSED_MOE_SHARE,
    STAND_IN_MOE_EXTRA_KERNELS,
    ServingSettings,
    settings_from,
)

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT.parent / "shared" / "data" / "h100_steps"
H100 = load_hardware("H100")


def roof(model: str, tp: int, fused: bool, ep_dp: int = 1) -> Roofline3Latency:
    ctx = LatencyContext(load_model(model), H100, tp, data_parallel_size=ep_dp, expert_parallel=ep_dp > 1,
                         max_num_seqs=256, max_num_batched_tokens=2048, async_scheduling=True)
    return Roofline3Latency(ctx, DEFAULTS, ServingSettings(fused_moe=fused))


@pytest.mark.parametrize(("model", "tp", "ep_dp"),
                         [("mixtral-8x7b", 1, 1), ("mixtral-8x7b", 2, 1), ("mixtral-8x7b", 4, 1), ("qwen3-30b-a3b", 1, 1),
                          ("qwen3-30b-a3b", 1, 4)])
def test_a_moe_step_saves_the_stand_ins_extra_routing_kernels_on_every_shard(model, tp, ep_dp):
    fused, stand_in = roof(model, tp, True, ep_dp), roof(model, tp, False, ep_dp)
    m = load_model(model)
    saved = m.num_moe_layers * DEFAULTS.moe_layer_overhead_us * (1.0 - FUSED_MOE_SHARE)
    for b in (1, 8, 64):
        shape = StepShape(0, 0, 0, b, b * 1000)
        assert stand_in.step_us(shape) - fused.step_us(shape) == pytest.approx(saved, abs=1.0)
        assert fused.breakdown(shape)["fused_moe_us"] == pytest.approx(-saved, rel=1e-12)
        # the step tables time the stand-in: its kernels are what they are compared with
        assert fused.kernel_us(shape) == stand_in.kernel_us(shape)
    mixed = StepShape(512, 512 * 300, 0, 16, 16 * 1000, 1)
    assert stand_in.step_us(mixed) - fused.step_us(mixed) == pytest.approx(saved, abs=1.0)


def test_a_dense_model_is_untouched():
    fused, stand_in = roof("llama-3.1-8b", 1, True), roof("llama-3.1-8b", 1, False)
    for b in (1, 32, 200):
        shape = StepShape(0, 0, 0, b, b * 700)
        assert fused.step_us(shape) == stand_in.step_us(shape)
        assert fused.breakdown(shape)["fused_moe_us"] == 0.0


def test_the_share_is_vllms_kernels_over_the_stand_ins():
    assert FUSED_MOE_SHARE == FUSED_MOE_EXTRA_KERNELS / STAND_IN_MOE_EXTRA_KERNELS
    assert 0.0 < FUSED_MOE_SHARE < 1.0


@pytest.mark.skipif(not STEPS.is_dir(), reason="needs ../shared/data/h100_steps (the stand-in's profiles)")
def test_the_stand_ins_extra_kernels_are_the_profiles_split():
    spec = importlib.util.spec_from_file_location("fused_moe_kernels", ROOT / "scripts" / "fused_moe_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = module.split(STEPS)
    assert got["moe_layer_extra"] == STAND_IN_MOE_EXTRA_KERNELS
    assert got["max_abs_residual_kernels"] < 1.0


def test_fused_moe_is_a_switch():
    assert settings_from({"serving": {"fused_moe": False}}) == dataclasses.replace(ServingSettings(), fused_moe=False)
    with pytest.raises(ConfigError, match="cluster.latency.serving.fused_moe"):
        settings_from({"serving": {"fused_moe": "yes"}})
