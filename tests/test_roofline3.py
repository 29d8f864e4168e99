"""The per-operator step model (cluster.latency.kind=roofline3): its terms by hand, its linear
basis (what the bounded least-squares fit solves with) against the step time, FP8 per the checkpoint's
ignore list, experts priced by rows per expert, and the routing-skew knob."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from distsim.catalog import load_hardware, load_model
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.roofline3 import (
    DEFAULTS,
    FP8_QUANT_CALL_US,
    Roofline3Coefficients,
    Roofline3Latency,
    coefficients_of,
    inclusion_probabilities,
    linear_of,
)

H100 = load_hardware("H100")
SCOUT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_vllm_runs" / "models" / (
    "llama-4-scout-17b-16e-instruct-fp8-dynamic"
)


def roof(model="llama-3.1-8b", tp=1, hw=H100, **k) -> Roofline3Latency:
    spec = load_model(model) if isinstance(model, str) else model
    return Roofline3Latency(LatencyContext(spec, hw, tp), dataclasses.replace(DEFAULTS, **k))


def prefill(n: int, seqs: int = 1) -> StepShape:
    return StepShape(n, n * (n + 1) // 2, n, 0, 0, seqs)


def shapes(seed: int, count: int = 200):
    rnd = random.Random(seed)
    for _ in range(count):
        p = rnd.choice([0, 0, rnd.randint(1, 6000)])
        d = rnd.randint(0 if p else 1, 400)
        s = rnd.randint(1, 4) if p else 0
        c0 = rnd.randint(0, 3000) if p else 0
        yield StepShape(p, p * (p + 1) // 2 + p * c0, p + c0 if p else 0, d, d * rnd.randint(1, 8000), s)


CASES = [("llama-3.1-8b", 1, 0.0), ("mixtral-8x7b", 2, 0.0), ("qwen3-30b-a3b", 1, 1.2), ("gpt-oss-20b", 1, 0.0),
         ("deepseek-v2-lite", 1, 0.8), ("llama-3.1-70b", 4, 0.0)]


@pytest.mark.parametrize(("model", "tp", "skew"), CASES)
def test_basis_sums_to_the_kernels_and_the_step(model, tp, skew):
    lm = roof(model, tp, routing_skew=skew)
    beta = linear_of(lm.coefficients)
    for shape in shapes(hash(model) % 1000):
        pairs, add, fixed = lm.basis(shape)
        val = lambda d: sum(beta[k] * v for k, v in d.items())  # noqa: E731
        kernels = sum(max(val(a), val(b)) for a, b in pairs) + val(add) + fixed
        assert kernels == pytest.approx(lm.kernel_us(shape), rel=1e-12, abs=1e-9)
        t = lm.breakdown(shape)
        assert lm.gpu_step_us(shape) == pytest.approx(kernels + t["all_reduce_us"], rel=1e-12)
        # the hot path's own float arithmetic: the same sum up to rounding to whole microseconds
        serving = t["padding_us"] + t["eager_us"] + t["sampler_us"] + t["host_us"] + t["paged_kv_us"] + t["fused_moe_us"]
        assert abs(lm.step_us(shape) - (lm.gpu_step_us(shape) + serving)) <= 0.5 + 1e-6


def test_linear_values_and_coefficients_round_trip():
    k = Roofline3Coefficients(compute_efficiency=0.6, gemm_half_tokens=50, memory_efficiency=0.7, activation_bytes_routed=9)
    back = coefficients_of(linear_of(k), k)
    for f in dataclasses.fields(k):
        assert getattr(back, f.name) == pytest.approx(getattr(k, f.name), rel=1e-12)


def test_each_matmul_is_the_larger_of_its_compute_and_its_weight_read():
    """Llama-3.1-8B: a one-token decode reads every dense weight (memory side); a 4096-token prompt
    computes 2 W (T + h) / (peak ce) (compute side). The lm_head is its own roofline, over the sampled rows."""
    m = load_model("llama-3.1-8b")
    lm = roof(compute_efficiency=0.7, gemm_half_tokens=100.0, memory_efficiency=0.8)
    w_dense = m.num_layers * (m.attn_sharded_params + m.kv_proj_params + m.layer_replicated_params + m.dense_mlp_params)
    w_dense += m.final_norm_params
    one = lm.breakdown(StepShape(0, 0, 0, 1, 100))
    lm_bytes = m.lm_head_params * 2
    assert one["dense_memory_us"] == pytest.approx((w_dense * 2 + lm_bytes) / (3.35e12 * 0.8) * 1e6, rel=1e-12)
    big = lm.breakdown(prefill(4096))
    dense_c = 2 * w_dense * (4096 + 100) / (989e12 * 0.7) * 1e6
    lm_c = 2 * m.lm_head_params * (1 + 100) / (989e12 * 0.7) * 1e6  # one sampled row: memory-bound
    assert big["dense_compute_us"] == pytest.approx(dense_c + lm_c, rel=1e-12)
    assert big["matmul_us"] == pytest.approx(dense_c + lm_bytes / (3.35e12 * 0.8) * 1e6, rel=1e-12)


def test_experts_are_priced_by_rows_per_expert():
    """Mixtral at 8 tokens touches E (1 - (1 - k/E)^8) experts; the expert GEMMs compute k T rows plus
    h_e rows per touched expert, at ce_e of the peak, and read the touched experts' weights."""
    m = load_model("mixtral-8x7b")
    lm = roof("mixtral-8x7b", expert_compute_efficiency=0.5, expert_half_rows=200.0, memory_efficiency=0.8)
    touched = 8 * (1 - (1 - 2 / 8) ** 8)
    assert lm.touched(8) == pytest.approx(touched, rel=1e-12)
    t = lm.breakdown(StepShape(0, 0, 0, 8, 8000))
    w = m.num_moe_layers * m.expert_params
    assert t["expert_compute_us"] == pytest.approx(2 * w * (2 * 8 + 200 * touched) / (989e12 * 0.5) * 1e6, rel=1e-12)
    assert t["expert_memory_us"] == pytest.approx(touched * w * 2 / (3.35e12 * 0.8) * 1e6, rel=1e-12)
    # a 2048-token prompt touches all 8 and is compute-bound: cost grows with its rows
    assert lm.breakdown(prefill(2048))["expert_compute_us"] > lm.breakdown(prefill(2048))["expert_memory_us"]


def test_routing_skew_touches_fewer_experts_as_measured():
    """moe_skew.csv, Qwen3-30B-A3B decode of 8 tokens: 52.6 / 42.3 / 33.5 of 128 experts touched at
    s = 0 / 0.8 / 1.2; a skewed small batch reads fewer experts and is faster, a large one is not."""
    for s, measured in ((0.0, 52.56), (0.8, 42.33), (1.2, 33.5)):
        assert roof("qwen3-30b-a3b", routing_skew=s).touched(8) == pytest.approx(measured, rel=0.03)
    assert sum(inclusion_probabilities(128, 8, 1.2)) == pytest.approx(8.0, rel=1e-9)
    uniform, skewed = roof("qwen3-30b-a3b"), roof("qwen3-30b-a3b", routing_skew=1.2)
    assert skewed.step_us(StepShape(0, 0, 0, 8, 8000)) < 0.9 * uniform.step_us(StepShape(0, 0, 0, 8, 8000))
    assert skewed.step_us(prefill(2048)) == pytest.approx(uniform.step_us(prefill(2048)), rel=0.01)


@pytest.mark.skipif(not SCOUT.is_dir(), reason=f"{SCOUT} is absent")
def test_fp8_per_the_ignore_list_with_the_quantisation_cost():
    """Llama-4-Scout FP8: attention projections, router and lm_head stay bf16 (the checkpoint's ignore
    list), the routed and shared experts run at the FP8 peak with 1-byte weights, and every quantised
    input pays the per-token quantisation kernel."""
    m = load_model(str(SCOUT))
    lm = roof(m, tp=2)
    units = lm._units
    bf16_params = units["dense"][0][0] * 989e12 / 2 / 1e6
    fp8_params = units["dense"][1][0] * 1979e12 / 2 / 1e6
    attn = m.num_layers * (m.attn_sharded_params / 2 + m.kv_proj_params * m.kv_heads_per_gpu(2) / m.num_kv_heads)
    assert bf16_params == pytest.approx(attn + m.num_layers * m.layer_replicated_params + m.num_moe_layers * m.router_params + m.final_norm_params, rel=1e-9)
    assert fp8_params == pytest.approx(m.num_moe_layers * m.shared_expert_params / 2, rel=1e-9)
    assert units["quant_fixed"] == pytest.approx(FP8_QUANT_CALL_US * 4 * m.num_moe_layers)  # shared + routed, 2 each
    unquantised = dataclasses.replace(m, quant_method="")
    assert roof(unquantised, tp=2)._units["quant_fixed"] == 0.0
    # FP8 makes a prompt's matmuls cheaper
    shape = prefill(2048)
    assert lm.breakdown(shape)["matmul_us"] < roof(unquantised, tp=2).breakdown(shape)["matmul_us"]


def test_overheads_per_layer_and_moe_layer():
    base = roof("mixtral-8x7b", layer_overhead_us=0.0, moe_layer_overhead_us=0.0)
    more = roof("mixtral-8x7b", layer_overhead_us=10.0, moe_layer_overhead_us=7.0)
    shape = StepShape(0, 0, 0, 4, 4000)
    assert more.gpu_step_us(shape) - base.gpu_step_us(shape) == pytest.approx(32 * 10 + 32 * 7)


def test_collectives_are_outside_the_kernels():
    one, four = roof("llama-3.1-70b", 4), roof("llama-3.1-70b", 8)
    shape = prefill(512)
    for lm in (one, four):
        t = lm.breakdown(shape)
        assert t["all_reduce_us"] > 0 and lm.gpu_step_us(shape) == pytest.approx(lm.kernel_us(shape) + t["all_reduce_us"])
