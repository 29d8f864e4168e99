"""Each term of the roofline step model on a step computed by hand from the model's and GPU's numbers."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from distsim.catalog import load_hardware, load_model
from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.roofline import RooflineCoefficients, RooflineLatency

H100 = load_hardware("H100")
LLAMA = load_model("llama-3.1-8b")  # 32 layers, hidden 4096, vocab 128256, GQA 8 KV heads of 128


# plain terms to add one to at a time (not the shipped defaults, which may be refitted)
BASE = dict(
    compute_efficiency=0.45,
    gemm_half_tokens=0.0,
    attention_efficiency=0.45,
    memory_efficiency=0.8,
    layer_overhead_us=0.0,
    sequence_overhead_us=0.0,
    step_overhead_us=500.0,
)


def roof(model=LLAMA, hw=H100, tp=1, **k) -> RooflineLatency:
    return RooflineLatency(LatencyContext(model, hw, tp), RooflineCoefficients(**{**BASE, **k}))


def prefill(n: int, seqs: int = 1) -> StepShape:
    return StepShape(n, n * (n + 1) // 2, n, 0, 0, seqs)


def test_matmul_efficiency_depends_on_the_rows():
    """A 2048-token prompt, compute-bound: dense matmul time = F' x P x (P + h) / P / (peak x ce)."""
    lm = roof(compute_efficiency=0.7, gemm_half_tokens=128.0)
    flops = 2 * LLAMA.active_matmul_params * 2048  # no lm_head for prompt tokens
    expected = flops * (2048 + 128) / 2048 / (989e12 * 0.7) * 1e6
    assert lm.breakdown(prefill(2048))["dense_compute_us"] == pytest.approx(expected, rel=1e-12)
    # at half-tokens rows the matmuls run at half the efficiency: twice the time of h = 0
    at_h = roof(compute_efficiency=0.7, gemm_half_tokens=128.0).breakdown(prefill(128))["dense_compute_us"]
    none = roof(compute_efficiency=0.7).breakdown(prefill(128))["dense_compute_us"]
    assert at_h == pytest.approx(2 * none, rel=1e-12)


def test_attention_has_its_own_efficiency():
    """Prefill attention FLOPs: 4 x heads x head_dim x layers per query-key pair, at ae of the peak."""
    n = 4096
    pairs = n * (n + 1) // 2
    expected = 4 * 32 * 128 * 32 * pairs / (989e12 * 0.25) * 1e6
    lm = roof(attention_efficiency=0.25)
    assert lm.breakdown(prefill(n))["attention_compute_us"] == pytest.approx(expected, rel=1e-12)
    assert roof(attention_efficiency=0.5).breakdown(prefill(n))["attention_compute_us"] == pytest.approx(expected / 2)


def test_layer_overhead_is_per_layer_per_step():
    base, more = roof(), roof(layer_overhead_us=25.0)
    for shape in (StepShape(0, 0, 0, 1, 100), prefill(512), StepShape(256, 256 * 257 // 2, 256, 8, 8000, 1)):
        assert more.step_us(shape) - base.step_us(shape) == pytest.approx(32 * 25.0, abs=1)
        assert more.gpu_step_us(shape) - base.gpu_step_us(shape) == pytest.approx(32 * 25.0)


def test_host_overhead_per_step_and_per_sequence():
    lm = roof(step_overhead_us=300.0, sequence_overhead_us=10.0)
    gpu = roof(step_overhead_us=0.0)
    decode = StepShape(0, 0, 0, 7, 7000)
    assert lm.step_us(decode) == int(gpu.gpu_step_us(decode) + 300 + 7 * 10 + 0.5)
    mixed = StepShape(300, 3 * (100 * 101 // 2), 300, 5, 5000, 3)  # 3 chunks of 100 tokens + 5 decodes
    assert lm.step_us(mixed) == int(gpu.gpu_step_us(mixed) + 300 + 8 * 10 + 0.5)
    assert lm.breakdown(mixed)["host_us"] == 300 + 80
    # the GPU time leaves the host out
    assert lm.gpu_step_us(mixed) == pytest.approx(gpu.gpu_step_us(mixed))


@pytest.mark.parametrize("hw_name", ["H100", "RTXPRO6000"])
def test_all_reduce_costs_the_link(hw_name):
    """TP2: 2 all-reduces per layer of T x hidden bf16 activations, ring (2 (tp-1)/tp of the bytes),
    10 us each plus the bytes over the GPU's link: NVLink 450 GB/s on the H100 SXM, PCIe Gen5 64 GB/s
    on the RTX PRO 6000."""
    hw = load_hardware(hw_name)
    tokens = 64
    per_reduce = 10.0 + 2 * (2 - 1) / 2 * tokens * 4096 * 2 / (hw.link_gbps_per_dir * 1e9) * 1e6
    lm = roof(hw=hw, tp=2)
    assert lm.breakdown(StepShape(0, 0, 0, tokens, tokens * 100))["all_reduce_us"] == pytest.approx(2 * 32 * per_reduce)
    assert roof(hw=hw).breakdown(StepShape(0, 0, 0, tokens, tokens * 100))["all_reduce_us"] == 0


def test_moe_expert_matmuls_from_distinct_experts():
    """Mixtral-8x7B (8 experts, top-2, 32 MoE layers): a 512-token prompt touches E (1 - (1-k/E)^T)
    experts per layer; the expert matmuls are priced with T k / E_t rows each, and read E_t experts."""
    m = load_model("mixtral-8x7b")
    lm = roof(model=m, compute_efficiency=0.7, gemm_half_tokens=100.0)
    t = 512
    touched = 8 * (1 - (1 - 2 / 8) ** t)
    expert_flops = 2 * 32 * 2 * m.expert_params * t
    compute = expert_flops * (1 + 100.0 * touched / (2 * t)) / (989e12 * 0.7) * 1e6
    memory = 32 * touched * m.expert_params * 2 / (3.35e12 * 0.8) * 1e6
    parts = lm.breakdown(prefill(t))
    assert parts["expert_compute_us"] == pytest.approx(compute, rel=1e-9)
    assert parts["expert_memory_us"] == pytest.approx(memory, rel=1e-9)
    # the prompt's expert FLOPs are not hidden behind the dense weights' reads: both are paid
    assert lm.gpu_step_us(prefill(t)) > parts["dense_memory_us"] + parts["expert_compute_us"]
    # a single decode token touches k experts: reads 2 of 8 experts' weights
    one = lm.breakdown(StepShape(0, 0, 0, 1, 100))
    assert one["expert_memory_us"] == pytest.approx(32 * 2 * m.expert_params * 2 / (3.35e12 * 0.8) * 1e6, rel=1e-9)


def test_fp8_matmuls_run_at_the_fp8_peak(tmp_path):
    """An FP8 (W8A8) checkpoint of Llama-3.1-8B: 1-byte weights, matmuls at the H100's 1979 TFLOP/s;
    attention stays at the bf16 peak. A GPU without an FP8 figure prices them at its bf16 peak."""
    text = resources.files("distsim.catalog").joinpath("data", "models", "Llama-3.1-8B.json").read_text()
    cfg = json.loads(text)
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    fp8 = load_model(str(path))
    assert fp8.fp8_matmuls and not LLAMA.fp8_matmuls
    shape = prefill(2048)
    bf16_parts, fp8_parts = roof().breakdown(shape), roof(model=fp8).breakdown(shape)
    assert fp8_parts["dense_compute_us"] == pytest.approx(bf16_parts["dense_compute_us"] * 989 / 1979, rel=1e-12)
    assert fp8_parts["attention_compute_us"] == pytest.approx(bf16_parts["attention_compute_us"])
    assert fp8_parts["dense_memory_us"] < 0.55 * bf16_parts["dense_memory_us"]
    a100 = load_hardware("A100-80G")
    assert roof(model=fp8, hw=a100).breakdown(shape)["dense_compute_us"] == pytest.approx(
        roof(hw=a100).breakdown(shape)["dense_compute_us"]
    )


@pytest.mark.parametrize(
    "key, value",
    [("gemm_half_tokens", -1), ("attention_efficiency", 0), ("layer_overhead_us", float("nan")), ("sequence_overhead_us", -2)],
)
def test_bad_coefficients_name_their_key(key, value):
    from omegaconf import OmegaConf

    from distsim.instance.latency.build import build_latency_model

    cfg = OmegaConf.create({"kind": "roofline", key: value})
    with pytest.raises(ConfigError) as err:
        build_latency_model(cfg, LatencyContext(LLAMA, H100, 1))
    assert err.value.key == f"cluster.latency.{key}"


def test_expert_parallel_spreads_the_experts_over_the_dp_engines():
    """Qwen3-30B-A3B (128 experts, top-8, 48 MoE layers), TP1 x DP2 with expert parallelism: each GPU
    holds half the experts; a step of T tokens on one engine routes 2T tokens in the group, touches
    E (1 - (1-k/E)^(2T)) experts of which it reads half, and pays two all-to-alls per MoE layer."""
    m = load_model("qwen3-30b-a3b")
    ep = RooflineLatency(LatencyContext(m, H100, 1, 2, True), RooflineCoefficients(**BASE))
    tp_only = RooflineLatency(LatencyContext(m, H100, 1, 2, False), RooflineCoefficients(**BASE))
    t = 16
    touched = 128 * (1 - (1 - 8 / 128) ** (2 * t))
    per_expert_us = 48 * m.expert_params * m.expert_weight_bytes / (3.35e12 * 0.8) * 1e6
    shape = StepShape(0, 0, 0, t, t * 100)
    assert ep.breakdown(shape)["expert_memory_us"] == pytest.approx(touched / 2 * per_expert_us, rel=1e-9)
    alone = 128 * (1 - (1 - 8 / 128) ** t)
    assert tp_only.breakdown(shape)["expert_memory_us"] == pytest.approx(alone * per_expert_us, rel=1e-9)
    # all-to-all: 2 per MoE layer, 10 us each plus T k hidden bf16 rows, half of them remote, over NVLink
    a2a = 2 * 48 * (10.0 + t * 8 * m.hidden_size * 2 * (2 - 1) / 2 / 450e9 * 1e6)
    assert ep.breakdown(shape)["all_reduce_us"] == pytest.approx(a2a, rel=1e-9)
    assert tp_only.breakdown(shape)["all_reduce_us"] == 0
    # the experts' weights are spread: each GPU keeps half of them
    assert m.weight_bytes_per_gpu(1, 2) == pytest.approx(
        m.weight_bytes_per_gpu(1) - m.routed_expert_bytes_per_gpu(1) / 2, abs=1
    )


def test_expert_parallel_run_keeps_every_request_and_frees_memory_for_kv():
    from distsim import load_config, simulate
    from distsim.cluster.pools import resolve_pools

    base = ["cluster.model=qwen3-30b-a3b", "cluster.instances=1", "cluster.engine.data_parallel_size=2"]
    cfg = load_config([*base, "cluster.engine.enable_expert_parallel=true", "workload.num_requests=120"])
    plain = load_config(base)
    assert resolve_pools(cfg.cluster)[0].engine.total_kv_blocks > resolve_pools(plain.cluster)[0].engine.total_kv_blocks
    result = simulate(cfg)
    assert result.summary["requests"]["completed"] == 120
    assert set(result.instances["dp_group"]) == {0}


def test_expert_parallel_on_a_dense_model_warns():
    from distsim import load_config
    from distsim.cluster.pools import resolve_pools
    from distsim.errors import ConfigWarning

    cfg = load_config(["cluster.engine.enable_expert_parallel=true"])
    with pytest.warns(ConfigWarning, match="enable_expert_parallel"):
        resolve_pools(cfg.cluster)


def test_expert_parallel_with_one_engine_is_tensor_parallelism_and_says_so():
    """Mixtral-8x7B at TP4 and DP1 with enable_expert_parallel: vLLM puts two whole experts on each of the
    four GPUs instead of a quarter of every expert, and keeps the all-reduce (its all-to-all kernels need
    data_parallel_size > 1). Each GPU then holds a quarter of the expert bytes either way and, with uniform
    routing, reads and computes the same expected share, so the step times and the KV cache are plain TP4's;
    a warning says the flag changes nothing. At DP2 the all-to-alls and the halved expert share appear."""
    from distsim import load_config
    from distsim.cluster.pools import resolve_pools
    from distsim.errors import ConfigWarning

    base = ["cluster.model=mixtral-8x7b", "cluster.instances=1", "cluster.engine.tensor_parallel_size=4"]
    (plain,) = resolve_pools(load_config(base).cluster)
    with pytest.warns(ConfigWarning, match="enable_expert_parallel: with data_parallel_size 1 the flag changes nothing"):
        (ep,) = resolve_pools(load_config([*base, "cluster.engine.enable_expert_parallel=true"]).cluster)
    m = plain.model
    assert m.routed_expert_bytes_per_gpu(4) == pytest.approx(2 * m.routed_expert_bytes_per_gpu(1) / m.num_experts)  # 2 of 8
    assert ep.engine.total_kv_blocks == plain.engine.total_kv_blocks
    for shape in (StepShape(0, 0, 0, 32, 32 * 900), StepShape(2048, 2048 * 1024, 2048, 8, 8 * 500, 1)):
        assert ep.latency.step_us(shape) == plain.latency.step_us(shape)
        assert ep.latency.breakdown(shape) == plain.latency.breakdown(shape)
    dp2 = [*base, "cluster.engine.tensor_parallel_size=2", "cluster.engine.data_parallel_size=2"]
    (two,) = resolve_pools(load_config([*dp2, "cluster.engine.enable_expert_parallel=true"]).cluster)
    (two_plain,) = resolve_pools(load_config(dp2).cluster)
    shape = StepShape(0, 0, 0, 32, 32 * 900)
    assert two.latency.breakdown(shape)["all_reduce_us"] > two_plain.latency.breakdown(shape)["all_reduce_us"]
    assert two.engine.total_kv_blocks > two_plain.engine.total_kv_blocks
