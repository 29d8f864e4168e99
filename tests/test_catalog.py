"""Catalog figures against published numbers, input validation, and the KV-capacity derivation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distsim.catalog import HARDWARE_NAMES, MODEL_NAMES, load_hardware, load_model
from distsim.catalog.capacity import derive_total_kv_blocks
from distsim.config.schema import EngineConfig
from distsim.errors import ConfigError, InputFileError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATA = Path(__file__).resolve().parents[1] / "distsim" / "catalog" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared/data not beside the repo")


def close(value: float, target: float, rel: float = 0.01) -> bool:
    return abs(value - target) <= rel * target


# ---- models against published figures ----------------------------------------------------------


def test_llama_8b_published_figures():
    m = load_model("llama-3.1-8b")
    assert m.kv_bytes_per_token == 131_072 == 32 * 8 * 128 * 2 * 2
    assert close(m.total_params, 8.03e9)
    assert m.active_params == m.total_params
    assert m.weight_bytes_per_gpu(1) == 2 * m.total_params


def test_llama_70b_published_figures():
    m = load_model("llama-3.1-70b")
    assert m.kv_bytes_per_token == 327_680
    assert close(m.total_params, 70.6e9)


def test_mixtral_published_figures():
    m = load_model("mixtral-8x7b")
    assert close(m.total_params, 46.7e9)
    assert close(m.active_params, 12.9e9)
    assert m.kv_bytes_per_token == 131_072
    assert (m.num_experts, m.experts_per_token, m.num_moe_layers) == (8, 2, 32)


@pytest.mark.parametrize(
    "name,total,active",
    [
        ("qwen2.5-7b", 7.61e9, None),  # Qwen2.5-7B-Instruct model card
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # Qwen3-30B-A3B model card
        ("deepseek-v2-lite", 15.7e9, None),  # DeepSeek-V2-Lite model card
        ("gpt-oss-20b", 20.9e9, None),  # gpt-oss model card (20.91 B)
    ],
)
def test_other_models_published_params(name, total, active):
    m = load_model(name)
    assert close(m.total_params, total)
    if active is not None:
        assert close(m.active_params, active, 0.02)


def test_mla_caches_the_latent_once_per_layer_and_replicates_it():
    m = load_model("deepseek-v2-lite")
    assert m.is_mla and m.num_moe_layers == 26 and m.first_k_dense_replace == 1
    assert m.kv_bytes_per_token == 27 * (512 + 64) * 2
    assert m.kv_bytes_per_token_per_gpu(2) == m.kv_bytes_per_token
    assert m.attn_flops_per_decode_pair() > m.attn_flops_per_pair()  # absorbed form works on the latent


def test_gpt_oss_sliding_layers_and_mxfp4_experts():
    m = load_model("gpt-oss-20b")
    assert (m.num_sliding_layers, m.sliding_window) == (12, 128)
    assert m.kv_bytes_per_token == 12 * 2 * 8 * 64 * 2  # full-attention layers only
    assert m.kv_window_bytes_per_seq_per_gpu(1) == 12 * 2 * 8 * 64 * 2 * 128
    assert close(m.weight_bytes_per_gpu(1), 13.8e9, 0.02)  # the MXFP4 checkpoint is about 13.8 GB


def test_tensor_parallel_sharding():
    m = load_model("llama-3.1-8b")
    assert m.kv_bytes_per_token_per_gpu(2) == m.kv_bytes_per_token / 2
    assert m.kv_bytes_per_token_per_gpu(16) == m.kv_bytes_per_token / 8  # 8 KV heads: replicated past TP8
    assert close(m.weight_bytes_per_gpu(2), m.weight_bytes_per_gpu(1) / 2, 0.001)


def test_linear_flops_and_attention_flops():
    m = load_model("llama-3.1-8b")
    embed = m.vocab_size * m.hidden_size
    assert m.linear_flops_per_token() == 2 * (
        m.total_params - embed - m.num_layers * 2 * m.hidden_size - m.hidden_size
    )
    assert m.linear_flops_per_token() - m.linear_flops_per_token(include_lm_head=False) == 2 * embed
    assert m.attn_flops_per_pair() == 32 * 4 * 32 * 128


def test_expected_experts_touched():
    m = load_model("mixtral-8x7b")
    assert m.expected_experts_touched(1) == pytest.approx(2.0)
    assert m.expected_experts_touched(10_000) == pytest.approx(8.0)
    # with every expert touched, a step reads all weights but the untied input embedding table
    assert m.weight_bytes_read_per_gpu(1, 10_000) == pytest.approx(m.weight_bytes_per_gpu(1) - m.unread_embedding_bytes_per_gpu(1))
    assert m.weight_bytes_read_per_gpu(1, 1) < 0.35 * m.weight_bytes_per_gpu(1)


# ---- model loading and validation --------------------------------------------------------------


def test_names_are_case_insensitive_and_all_load():
    assert load_model("LLaMA-3.1-8B") is load_model("llama-3.1-8b")
    assert load_model("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"
    for name in MODEL_NAMES:
        assert load_model(name).total_params > 0


def test_unknown_model_names_the_key():
    with pytest.raises(ConfigError) as err:
        load_model("llama-9")
    assert (
        err.value.key == "cluster.model"
        and "known:" in err.value.message
        and "config.json" in err.value.message
    )


def test_model_from_path_and_file_errors(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((DATA / "models" / "Llama-3.1-8B.json").read_text())
    assert load_model(str(path)).kv_bytes_per_token == 131_072
    assert load_model(str(tmp_path)).total_params == load_model("llama-3.1-8b").total_params
    with pytest.raises(InputFileError, match="no such"):
        load_model(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"num_hidden_layers": 2,\n oops}')
    with pytest.raises(InputFileError) as err:
        load_model(str(bad))
    assert err.value.path == str(bad) and err.value.line == 2


BASE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
}


@pytest.mark.parametrize(
    "change,rule",
    [
        ({"num_key_value_heads": 3}, "must divide"),
        ({"hidden_size": 60}, "divisible"),
        ({"num_local_experts": 4, "num_experts_per_tok": 5}, "exceeds"),
        ({"num_hidden_layers": 0}, ">= 1"),
        ({"vocab_size": None}, "missing required field 'vocab_size'"),
        ({"torch_dtype": "int3"}, "dtype"),
        (
            {
                "quantization_config": {"quant_method": "awq"},
                "num_local_experts": 4,
                "num_experts_per_tok": 2,
            },
            "awq",
        ),
    ],
)
def test_invalid_architectures(tmp_path, change, rule):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**BASE, **change}))
    with pytest.raises(ConfigError, match=rule) as err:
        load_model(str(path))
    assert err.value.key == "cluster.model" and str(path) in err.value.message


@needs_shared
def test_shipped_model_configs_are_copies_of_shared():
    for f in (SHARED / "models").glob("*.json"):
        assert (DATA / "models" / f.name).read_bytes() == f.read_bytes()


# ---- hardware ----------------------------------------------------------------------------------


def test_hardware_aliases_and_values():
    h100 = load_hardware("H100")
    assert load_hardware("h100-sxm-80g") is h100 and load_hardware("rtx pro 6000") is load_hardware(
        "RTXPRO6000"
    )
    assert (h100.bf16_tflops, h100.hbm_bw_tbps, h100.memory_bytes, h100.link_gbps_per_dir) == (
        989,
        3.35,
        85899345920,
        450,
    )
    assert h100.fp8_tflops == 1979 and h100.host_link_gbps_per_dir == 64 and load_hardware("A100-80G").fp8_tflops is None
    for name in HARDWARE_NAMES:
        hw = load_hardware(name)
        assert hw.peak_flops > 0 and hw.mem_bw_bytes_per_s > 0 and hw.price_usd_per_gpu_hour > 0
        assert hw.host_link_gbps_per_dir > 0 and hw.matmul_tflops(True) >= hw.bf16_tflops


def test_every_hardware_number_has_a_source():
    gpus = json.loads((DATA / "hardware.json").read_text())["gpus"]
    for gpu in gpus.values():
        for field, item in gpu.items():
            if field == "achieved":  # what the GPU achieves of its datasheet: each term its own source
                for term, got in item.items():
                    assert got["source"].strip(), term
            elif field != "aliases":
                assert item["source"].strip(), field


@needs_shared
def test_hardware_matches_shared_values():
    shared = json.loads((SHARED / "hardware.json").read_text())["gpus"]
    for ours, theirs in [
        ("H100", "H100-SXM-80G"),
        ("A100-80G", "A100-SXM-80G"),
        ("L40S", "L40S-48G"),
        ("B200", "B200-SXM"),
    ]:
        hw, s = load_hardware(ours), shared[theirs]
        assert hw.bf16_tflops == s["bf16_tflops_dense"]["value"]
        assert hw.hbm_bw_tbps == s["hbm_bw_TBps"]["value"]
        assert hw.memory_bytes == s["memory"]["bytes"]


def test_unknown_hardware():
    with pytest.raises(ConfigError) as err:
        load_hardware("TPUv9")
    assert err.value.key == "cluster.hardware" and "H100" in err.value.message


# ---- KV capacity -------------------------------------------------------------------------------


@needs_shared
def test_kv_blocks_match_vllm_on_rtx4090():
    """vLLM 0.19 reported 2588 blocks for Llama-3.1-8B on an RTX 4090 (0.9 utilisation, block 16)."""
    meta = json.loads((SHARED / "llmservingsim_bench" / "RTX4090_Llama-3.1-8B" / "meta.json").read_text())
    kv = meta["kv_cache"]
    engine = EngineConfig(
        tensor_parallel_size=1,
        block_size=kv["block_size"],
        gpu_memory_utilization=kv["gpu_memory_utilization"],
        activation_reserve_fraction=0.05,
    )
    blocks = derive_total_kv_blocks(load_model("llama-3.1-8b"), load_hardware("RTX4090"), engine)
    assert abs(blocks - kv["num_gpu_blocks"]) <= 0.03 * kv["num_gpu_blocks"]  # derived 2576: -0.5%


def test_kv_blocks_scale_with_tp_and_memory():
    m, e1, e2 = (
        load_model("llama-3.1-70b"),
        EngineConfig(tensor_parallel_size=4),
        EngineConfig(tensor_parallel_size=8),
    )
    assert derive_total_kv_blocks(m, load_hardware("H100"), e2) > 2 * derive_total_kv_blocks(
        m, load_hardware("H100"), e1
    )


def test_model_that_does_not_fit_names_tp_and_gib():
    with pytest.raises(ConfigError) as err:
        derive_total_kv_blocks(load_model("llama-3.1-70b"), load_hardware("L40S"), EngineConfig())
    assert err.value.key == "cluster.engine.tensor_parallel_size"
    assert "GiB" in err.value.message and "llama-3.1-70b" in err.value.message


@pytest.mark.parametrize("tp", [0, 3, -1])
def test_bad_tensor_parallel_size(tp):
    with pytest.raises(ConfigError) as err:
        derive_total_kv_blocks(
            load_model("llama-3.1-8b"), load_hardware("H100"), EngineConfig(tensor_parallel_size=tp)
        )
    assert err.value.key == "cluster.engine.tensor_parallel_size"


def test_bad_memory_utilisation_names_the_key():
    with pytest.raises(ConfigError) as err:
        derive_total_kv_blocks(
            load_model("llama-3.1-8b"),
            load_hardware("H100"),
            EngineConfig(gpu_memory_utilization=1.5),
            key_prefix="cluster.pools.0.engine",
        )
    assert err.value.key == "cluster.pools.0.engine.gpu_memory_utilization"


def test_a_step_reads_every_weight_but_the_untied_input_embedding_table():
    m = load_model("llama-3.1-8b")  # untied: 128,256 x 4,096 bf16 input table, about 1.05 GB
    skipped = m.weight_bytes_per_gpu(1) - m.weight_bytes_read_per_gpu(1, 1)
    assert skipped == 128_256 * 4_096 * 2
    tied = load_model("qwen2.5-7b")
    if tied.tie_word_embeddings:
        assert tied.weight_bytes_read_per_gpu(1, 1) == tied.weight_bytes_per_gpu(1)
