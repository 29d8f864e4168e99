"""Configs that nest the language model under ``text_config`` (Llama-4) and FP8 weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from distsim.catalog.models import MODEL_NAMES, load_model, model_from_hf_config
from distsim.errors import ConfigError

RUNS_MODELS = Path(__file__).parents[1].parent / "shared" / "data" / "h100_vllm_runs" / "models"
SCOUT = RUNS_MODELS / "llama-4-scout-17b-16e-instruct-fp8-dynamic"

# Recorded at HEAD before text_config/FP8 reading: (weight bytes per GPU at TP1, KV bytes per token,
# active params). The shipped catalog models must keep them exactly.
BEFORE = {
    "llama-3.1-8b": (16060522496, 131072, 8030261248),
    "llama-3.1-8b-instruct": (16060522496, 131072, 8030261248),
    "llama-3.1-70b": (141107412992, 327680, 70553706496),
    "mixtral-8x7b": (93405585408, 131072, 12879925248),
    "qwen2.5-7b": (15231233024, 57344, 7615616512),
    "qwen3-30b-a3b": (61064245248, 98304, 3353032704),
    "deepseek-v2-lite": (31412968448, 31104, 2661150208),
    "gpt-oss-20b": (13751518848, 24576, 4187440704),
    "codellama-34b": (67487940608, 196608, 33743970304),  # (33.7 B, GQA 8 KV heads)
}

SMALL_MOE = {
    "model_type": "llama4_text",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 128,
    "intermediate_size_mlp": 512,
    "interleave_moe_layer_step": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 1,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}


def test_catalog_models_unchanged():
    assert set(BEFORE) == set(MODEL_NAMES)
    for name, (weights, kv, active) in BEFORE.items():
        m = load_model(name)
        assert (m.weight_bytes_per_gpu(1), m.kv_bytes_per_token, m.active_params) == (weights, kv, active), (
            name
        )


@pytest.mark.skipif(not RUNS_MODELS.is_dir(), reason="shared run data absent")
def test_every_run_config_loads():
    dirs = sorted(p for p in RUNS_MODELS.iterdir() if (p / "config.json").is_file())
    assert dirs
    for d in dirs:
        m = load_model(str(d))
        assert m.weight_bytes_per_gpu(1) > 0 and m.kv_bytes_per_token > 0, d.name


def test_text_config_equals_top_level():
    top = {**SMALL_MOE, "torch_dtype": "bfloat16"}
    nested = {
        "model_type": "llama4",
        "torch_dtype": "bfloat16",
        "text_config": SMALL_MOE,
        "vision_config": {},
    }
    assert model_from_hf_config(nested, "m", "nested.json") == model_from_hf_config(top, "m", "top.json")


def test_llama4_layout():
    m = model_from_hf_config(SMALL_MOE, "m", "x.json")
    assert (m.num_moe_layers, m.num_shared_experts, m.intermediate_size) == (2, 1, 512)
    h = 256
    assert m.dense_mlp_params == 3 * h * 512 and m.expert_params == m.shared_expert_params == 3 * h * 128


def test_text_config_errors_name_the_nested_key():
    bad = {"text_config": {**SMALL_MOE, "num_hidden_layers": "4"}}
    with pytest.raises(ConfigError, match="text_config.num_hidden_layers"):
        model_from_hf_config(bad, "m", "bad.json")
    with pytest.raises(ConfigError, match="'text_config' must be an object"):
        model_from_hf_config({"text_config": [1]}, "m", "bad.json")


def _fp8(quant: dict) -> dict:
    return {**SMALL_MOE, "torch_dtype": "bfloat16", "quantization_config": quant}


def test_fp8_weight_bytes_by_hand():
    """Block FP8 [128, 128]: linear layers at 1 byte + one fp32 scale per block; lm_head (ignored) and the
    router (vLLM never quantises it) kept bf16."""
    quant = {
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head", "re:.*router"],
    }
    m = model_from_hf_config(_fp8(quant), "m", "x.json")
    h, v, layers, e = 256, 1000, 4, 4

    def fp8(rows: int, cols: int) -> int:  # bytes of one FP8 matrix with its block scales
        return rows * cols + 4 * -(-rows // 128) * -(-cols // 128)

    attn = fp8(256, h) + fp8(64, h) * 2 + fp8(h, 256)
    mlp = 2 * fp8(128, h) + fp8(h, 128)
    dense = 2 * fp8(512, h) + fp8(h, 512)
    norms = 2 * h * 2
    moe = (e + 1) * mlp + e * h * 2  # routed + shared experts, bf16 router
    total = layers * (attn + norms) + 2 * dense + 2 * moe + 2 * v * h * 2 + h * 2  # embed, lm_head, norm
    assert m.weight_bytes_per_gpu(1) == total
    assert m.kv_bytes_per_token == layers * 2 * 2 * 32 * 2  # KV stays bf16


def test_compressed_tensors_channel_and_fp8_kv():
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}
    quant = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": group},
        "ignore": [
            f"language_model.model.layers.{i}.self_attn.{p}"
            for i in range(4)
            for p in ("q_proj", "k_proj", "v_proj", "o_proj")
        ]
        + ["language_model.lm_head"],
        "kv_cache_scheme": {"num_bits": 8, "type": "float"},
    }
    m = model_from_hf_config({"text_config": SMALL_MOE, "quantization_config": quant}, "m", "x.json")
    b = model_from_hf_config(SMALL_MOE, "m", "x.json")
    h = 256
    mlp_saved = 3 * h * 128 - 4 * (2 * 128 + h)  # 1 byte saved per weight, 4 bytes per output channel
    dense_saved = 3 * h * 512 - 4 * (2 * 512 + h)
    saved = 2 * dense_saved + 2 * 5 * mlp_saved
    assert b.weight_bytes_per_gpu(1) - m.weight_bytes_per_gpu(1) == saved
    assert m.kv_bytes_per_token * 2 == b.kv_bytes_per_token


@pytest.mark.parametrize(
    "quant", [{"quant_method": "awq"}, {"quant_method": "gptq"}, {"quant_method": "bitsandbytes"}]
)
def test_other_methods_refused(quant):
    with pytest.raises(ConfigError, match="is not supported"):
        model_from_hf_config(_fp8(quant), "m", "x.json")


def test_int8_compressed_tensors_refused():
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}
    with pytest.raises(ConfigError, match="8-bit float"):
        model_from_hf_config(
            _fp8({"quant_method": "compressed-tensors", "config_groups": {"g": group}}), "m", "x.json"
        )


def test_the_guide_says_what_the_reader_accepts_fp8_included():
    """The guide's list of refused quantisations (docs/guide/run.md) names FP8 among the accepted ones, as the
    reader is."""
    fp8 = model_from_hf_config(_fp8({"quant_method": "fp8"}), "m", "x.json")
    assert fp8.fp8_matmuls  # accepted, not refused
    readme = " ".join((Path(__file__).parents[1] / "docs" / "guide" / "run.md").read_text(encoding="utf-8").split())
    refusal = readme[readme.index("sizes have sane upper bounds"):].split("each mistake is one line")[0]
    assert "FP8" in refusal and refusal.index("FP8") < refusal.index("are refused"), refusal


@pytest.mark.skipif(not SCOUT.is_dir(), reason="shared run data absent")
def test_llama4_scout_fp8():
    m = load_model(str(SCOUT))
    assert m.num_moe_layers == 48 and m.num_experts == 16 and m.experts_per_token == 1
    assert abs(m.total_params / 109e9 - 1) < 0.03  # published 109B includes the vision encoder (not counted)
    assert abs(m.active_params / 17e9 - 1) < 0.03
    assert m.attn_weight_bytes == m.lm_head_weight_bytes == 2.0  # ignored: bf16
    assert m.router_weight_bytes == 0.0  # the model dtype: vLLM never quantises the router
    assert 1.0 < m.expert_weight_bytes < 1.001  # FP8 + one fp32 scale per output channel
    tp4 = m.weight_bytes_per_gpu(4)
    assert 27e9 < tp4 < 30e9  # ~103B FP8 expert weights + ~5B bf16 attention/vocab, over 4 GPUs
    # the real run at TP2 had 8253 KV blocks of 16 tokens on an 80 GB H100: weights + KV must fit
    assert m.weight_bytes_per_gpu(2) + 8253 * 16 * m.kv_bytes_per_token_per_gpu(2) < 0.9 * 85e9
