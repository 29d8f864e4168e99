"""The per-operator step model, the default (``cluster.latency.kind=roofline3``): every term a kernel
class, each coefficient pinned by a measurement (docs/fidelity.md, "The step model, term by term").

For a step of P prompt tokens in S chunks (prefill_attn_pairs A, prefill_kv_tokens K) and D decoding
sequences attending to C KV tokens in all, on one GPU of a tensor-parallel group of ``tp``, with
T = P + D matmul rows and R = D + S sampled rows (vLLM computes logits at each sequence's last token):

step = dense + lm_head + experts + attention + activations + fp8 quantisation + layers + collectives + host

dense       = sum over the precisions p of the dense weights (bf16; FP8 where the checkpoint quantises):
              max(2 W_p (T + h) / (peak_p ce),  B_p / (bw me))
lm_head     = max(2 W_lm (R + h) / (peak ce),   B_lm / (bw me))
experts     = max(2 W_e (k T + h_e E_t) / (peak_e ce_e),  E_t B_e / (bw me))               (MoE)
attention   = F_pair A / (peak ae)  +  kv K / (bw me)
              + max(F_dpair C / (peak ae),  kv C / (bw me))                (+ sliding-window terms)
activations = T (a_h H L + a_i I_tok + a_r k H L_moe) / (bw me)
fp8 quant   = T Q_tok x 5.26 / bw  +  3.55 us x quantised inputs per step                    (FP8)
layers      = L layer_overhead_us + L_moe moe_layer_overhead_us  (serving: vLLM's fused MoE launches a share
              of the stand-in's MoE-layer kernels, serving.py)
collectives = TP all-reduces by message size, TP degree and path (allreduce.py), expert-parallel all-to-alls
sampling    = (R + sampler_extra_rows) x vocab x sampler_bytes_per_logit / (bw me) + sampler_call_us
padding     = the matmuls, per-token kernels and collectives of the CUDA graph's padded rows (serving.py)
eager       = eager_layer_overhead_us x L for a step above the largest captured size (launch gaps)
host        = step_overhead_us + sequence_overhead_us x (D + S): only its excess over the GPU step's
              context-free part adds under async scheduling, all of it without (serving.py)

Why each term, and the data that pins it:

- **Each matmul is its own roofline**: the larger of its compute and its weight read (max, not a sum:
  the sum misprices the crossover, +18% at <= 256 prompt tokens and -8% at >= 512 on the H100 tables).
  All dense weights of one precision share one arithmetic intensity, so their maxima add up to one max
  per precision; the lm_head has other rows (R, not T) and gets its own. cuBLAS loses efficiency on few
  rows: h rows' worth of time per matmul (``gemm_half_tokens``), ce x M / (M + h) of the peak.
  Pinned by the dense step tables (Llama-3.1-8B, Qwen2.5-7B at TP 1; Llama-3.1-70B TP 4, CodeLlama-34B
  TP 2 per-GPU shapes) and checked against micro_gemm_shapes (0.71 of the bf16 peak at M >= 512).
- **FP8 (W8A8)** matmuls, the groups a checkpoint quantises (its ``ignore`` list leaves Scout's attention
  projections, router and lm_head in bf16), run at the GPU's FP8 peak at the same fraction ce (dense FP8
  GEMMs reach 0.71 of the FP8 peak in micro_fp8_gemm, bf16 ones 0.71 of theirs) and read 1-byte weights.
  Their activations are quantised per token first: a kernel per quantised input, 3.55 us plus 5.26 bytes
  per element at the datasheet bandwidth (micro_fp8_gemm's quant_us, fitted by least squares).
- **Experts are grouped GEMMs priced by rows per expert**: a step's T tokens touch E_t experts per MoE
  layer, each with k T / E_t rows at ce_e x r / (r + h_e) of the peak (``expert_compute_efficiency``,
  ``expert_half_rows``), and read only the touched experts' weights. E_t = E (1 - (1 - k/E)^T) for uniform
  routing; ``routing_skew`` s > 0 gives expert e of popularity rank r a share proportional to r^-s and
  counts touched experts from the per-token inclusion probabilities (moe_skew.csv: within 1% of the
  measured counts for Qwen3-30B-A3B). Pinned by the Mixtral, Qwen3-30B-A3B and Llama-4-Scout tables and
  moe_skew's decodes of 33-128 touched experts; the grouped GEMMs of micro_fp8_gemm agree (h_e 165-220).
- **Attention** is serial work beside the matmuls: prefill attention FLOPs at ``attention_efficiency``,
  the prefill chunks' KV reads, and the decodes' attention bound by their KV reads.
- **Activations**: norms, residual adds, rotary, SiLU-and-mul, MoE gather and combine move bytes per
  token: ``activation_bytes_hidden`` per hidden element per layer, ``activation_bytes_intermediate`` per
  element of the MLP or active experts' intermediate width, ``activation_bytes_routed`` per hidden element
  of each routed token copy. Pinned by prefills of 2048-8192 tokens (and by the kernel profiles'
  elementwise classes, 0.06-0.14 us per token and layer).
- **Layers**: ``layer_overhead_us`` per layer (launch- and latency-bound small kernels: norms, KV writes,
  attention launches) and ``moe_layer_overhead_us`` per MoE layer (router, top-k, sort, align).
- **Host**: vLLM's per-step CPU work, fitted on real runs with the GPU terms frozen.

The coefficients are fitted by bounded linear least squares (``python -m distsim.calibrate steps
FOLDER --fit``): every term is linear in 1/ce, h/ce, 1/ce_e, h_e/ce_e, 1/ae, 1/me, a_x/me and the
overheads once it is known which side of each max is larger, so the fit alternates that choice with a
bounded least-squares solve (:meth:`Roofline3Latency.basis` gives the terms; tests check that they sum
to :meth:`gpu_step_us`). Everything is folded into per-unit constants at construction: a step costs a
few float operations; :meth:`decode_steps_us` repeats the decode branch's operations in numpy, so both
agree to the bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from distsim.instance.latency import roofline
from distsim.instance.latency.allreduce import NCCL_PCIE, NCCL_RING
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.registry import register_latency_model
from distsim.instance.latency.roofline import RooflineLatency, communication
from distsim.instance.latency.serving import (
    FUSED_MOE_SHARE,
    SAMPLERS,
    ServingLayer,
    ServingSettings,
    sampler_path,
    settings_from,
)

FP8_QUANT_CALL_US = 3.55  # micro_fp8_gemm.csv quant_us: fixed part of one per-token quantisation kernel
FP8_QUANT_BYTES_PER_ELEMENT = 5.26  # and its part per input element, as bytes at the datasheet bandwidth


@dataclass(frozen=True)
class Roofline3Coefficients:
    """The step model's coefficients: one set for every GPU, model and TP degree (docs/fidelity.md)."""

    # GPU terms: python -m distsim.calibrate steps ../shared/data/h100_steps --fit
    # (the step-only fit: every GPU term pinned by the engine-step tables, none moved by the runs)
    compute_efficiency: float = 0.7531
    gemm_half_tokens: float = 80.34
    expert_compute_efficiency: float = 0.9025
    expert_half_rows: float = 255.9
    attention_efficiency: float = 0.3501
    memory_efficiency: float = 0.7942
    activation_bytes_hidden: float = 34.61
    activation_bytes_intermediate: float = 14.95
    activation_bytes_routed: float = 22.40
    layer_overhead_us: float = 31.58
    moe_layer_overhead_us: float = 51.70
    routing_skew: float = 0.0
    # collectives: no step table holds them (kernels only); the fixed time of one custom all-reduce,
    # fitted on the TP 2 and TP 4 runs with every other term frozen (python -m distsim.fidelity.runfit,
    # docs/data/h100_runfit.json)
    all_reduce_latency_us: float = 1.122
    # and the fraction of the link's bandwidth its peer reads reach
    all_reduce_link_efficiency: float = 1.0
    # the two-shot custom all-reduce's barrier between its stages: vLLM's kernel profile on an H100
    # (allreduce.py, CUSTOM_TWO_SHOT_US; python scripts/allreduce_fit.py -> docs/data/allreduce_fit.json)
    all_reduce_two_shot_us: float = 7.212
    # NCCL's ring on NVLink (fixed us, us per ring step, bus bandwidth over the link per direction) and
    # NCCL over PCIe (fixed us, algorithm bandwidth over the link): allreduce.py's NCCL_RING and NCCL_PCIE,
    # fitted on Vidur's H100 profiles; a profile of the user's GPU fits its own (distsim.fidelity.collectives)
    all_reduce_nccl_fixed_us: float = NCCL_RING[0]
    all_reduce_nccl_step_us: float = NCCL_RING[1]
    all_reduce_nccl_bus_efficiency: float = NCCL_RING[2]
    all_reduce_pcie_fixed_us: float = NCCL_PCIE[0]
    all_reduce_pcie_efficiency: float = NCCL_PCIE[1]
    # a step run without a CUDA graph: the GPU's idle time between kernels per layer (the median over
    # 257-512 rows of docs/data/h100_serving/run2/graph.csv's eager less graph time, over its 32 layers)
    eager_layer_overhead_us: float = 14.81
    # sampling: vLLM's temperature sampling measured on an H100; the path cluster.latency.serving.sampler
    # picks (by default the model's own, serving.sampler_path) replaces them with its measured terms
    # (serving.SAMPLERS): a fixed time per step, bytes moved per logit of each sampled row, and the rows'
    # worth of time its row-per-block kernels take at any batch
    sampler_call_us: float = 14.09
    sampler_bytes_per_logit: float = 49.09
    sampler_extra_rows: float = 18.7
    # vLLM's attention reads the KV cache paged in blocks, the step tables' stand-in contiguously: its KV
    # read time over the stand-in's (1: the tables' rate); fitted on the runs (docs/fidelity.md)
    paged_kv_read_factor: float = 1.0
    # host: a stand-in step loop's CPU time per step and per sequence on an H100 host, a floor for
    # vLLM's (docs/data/h100_serving/summary.json, host_loop.fit.step_total); async scheduling hides it
    # behind the GPU step (serving.py), so the runs cannot pin it
    sequence_overhead_us: float = 0.791
    step_overhead_us: float = 52.11


DEFAULTS = Roofline3Coefficients()
FITTED_ON = "H100"  # the GPU whose step tables the GPU terms of DEFAULTS are fitted on
SERVING_DEFAULTS = ServingSettings()
# the step-only fit (python -m distsim.calibrate steps ... --fit) with the older roofline's host terms (the
# "step-only GPU terms" replay of scripts/fidelity_load_slope.py)
STEP_FIT = replace(DEFAULTS, sequence_overhead_us=5.82, step_overhead_us=864.0)
# name -> (low, high, low bound open)
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "compute_efficiency": (0.0, 1.0, True),
    "gemm_half_tokens": (0.0, 1e6, False),
    "expert_compute_efficiency": (0.0, 1.0, True),
    "expert_half_rows": (0.0, 1e6, False),
    "attention_efficiency": (0.0, 1.0, True),
    "memory_efficiency": (0.0, 1.0, True),
    "activation_bytes_hidden": (0.0, 1e4, False),
    "activation_bytes_intermediate": (0.0, 1e4, False),
    "activation_bytes_routed": (0.0, 1e4, False),
    "layer_overhead_us": (0.0, 1e6, False),
    "moe_layer_overhead_us": (0.0, 1e6, False),
    "routing_skew": (0.0, 10.0, False),
    "all_reduce_latency_us": (0.0, 1e6, False),
    "all_reduce_link_efficiency": (0.0, 1.0, True),
    "all_reduce_two_shot_us": (0.0, 1e4, False),
    "all_reduce_nccl_fixed_us": (0.0, 1e6, False),
    "all_reduce_nccl_step_us": (0.0, 1e4, False),
    "all_reduce_nccl_bus_efficiency": (0.0, 1.0, True),
    "all_reduce_pcie_fixed_us": (0.0, 1e6, False),
    "all_reduce_pcie_efficiency": (0.0, 1.0, True),
    "eager_layer_overhead_us": (0.0, 1e4, False),
    "sampler_bytes_per_logit": (0.0, 1e4, False),
    "sampler_extra_rows": (0.0, 1e4, False),
    "paged_kv_read_factor": (0.0, 10.0, True),
    "sampler_call_us": (0.0, 1e6, False),
    "sequence_overhead_us": (0.0, 1e6, False),
    "step_overhead_us": (0.0, 1e9, False),
}
# the linear coefficients the fit solves for (``basis``), and how they map onto the coefficients
LINEAR = ("inv_ce", "h_inv_ce", "inv_cee", "he_inv_cee", "inv_ae", "inv_me", "act_h", "act_i", "act_r", "layer", "moe_layer")


def linear_of(k: Roofline3Coefficients) -> dict[str, float]:
    inv_me = 1.0 / k.memory_efficiency
    return {
        "inv_ce": 1.0 / k.compute_efficiency,
        "h_inv_ce": k.gemm_half_tokens / k.compute_efficiency,
        "inv_cee": 1.0 / k.expert_compute_efficiency,
        "he_inv_cee": k.expert_half_rows / k.expert_compute_efficiency,
        "inv_ae": 1.0 / k.attention_efficiency,
        "inv_me": inv_me,
        "act_h": k.activation_bytes_hidden * inv_me,
        "act_i": k.activation_bytes_intermediate * inv_me,
        "act_r": k.activation_bytes_routed * inv_me,
        "layer": k.layer_overhead_us,
        "moe_layer": k.moe_layer_overhead_us,
    }


def coefficients_of(beta: dict[str, float], base: Roofline3Coefficients = DEFAULTS) -> Roofline3Coefficients:
    """The coefficients that linear values ``beta`` (a full :data:`LINEAR` set) stand for."""
    inv_me = beta["inv_me"]
    return replace(
        base,
        compute_efficiency=1.0 / beta["inv_ce"],
        gemm_half_tokens=beta["h_inv_ce"] / beta["inv_ce"],
        expert_compute_efficiency=1.0 / beta["inv_cee"],
        expert_half_rows=beta["he_inv_cee"] / beta["inv_cee"],
        attention_efficiency=1.0 / beta["inv_ae"],
        memory_efficiency=1.0 / inv_me,
        activation_bytes_hidden=beta["act_h"] / inv_me,
        activation_bytes_intermediate=beta["act_i"] / inv_me,
        activation_bytes_routed=beta["act_r"] / inv_me,
        layer_overhead_us=beta["layer"],
        moe_layer_overhead_us=beta["moe_layer"],
    )


def _width(m: Any, value: float) -> float:
    return float(value or m.dtype_bytes)


def inclusion_probabilities(experts: int, top_k: int, skew: float) -> list[float]:
    """Per expert (by popularity rank), the chance that one token's top-k includes it when expert r's
    share is proportional to r^-skew: uniform k/E at skew 0, else the Poisson form 1 - exp(-lam q_r)
    with lam such that the chances sum to k (checked against moe_skew.csv's measured counts)."""
    if skew <= 0.0:
        return [top_k / experts] * experts
    q = [r**-skew for r in range(1, experts + 1)]
    total = sum(q)
    q = [x / total for x in q]
    lo, hi = 0.0, 1e9
    for _ in range(200):
        lam = 0.5 * (lo + hi)
        if sum(1.0 - math.exp(-lam * x) for x in q) < top_k:
            lo = lam
        else:
            hi = lam
    return [1.0 - math.exp(-lam * x) for x in q]


class Roofline3Latency(RooflineLatency):
    """Per-operator step times (see the module docstring). Shares the decode fast path with
    :class:`RooflineLatency` (``decode_run_ends``, ``decode_steps_us``) through ``_decode_batch``."""

    # long: every term folded into per-unit constants once, so that a step costs a few float operations
    def __init__(  # noqa: PLR0915
        self, ctx: LatencyContext, coefficients: Roofline3Coefficients = DEFAULTS, serving: ServingSettings = SERVING_DEFAULTS
    ):
        m, hw, tp = ctx.model, ctx.hardware, ctx.tensor_parallel_size
        k = coefficients
        self.tp = tp
        self.coefficients = k
        self._units = units = _units(ctx)
        beta = linear_of(k)
        self._beta = beta
        # dense matmuls per precision: (compute us per row incl. h, weight read us)
        self._dense = [
            (u * beta["inv_ce"], u * beta["h_inv_ce"], b * beta["inv_me"]) for u, b in units["dense"] if u or b
        ]
        u, b = units["lm_head"]
        self._lm = (u * beta["inv_ce"], u * beta["h_inv_ce"], b * beta["inv_me"])
        self._moe = m.is_moe
        ep_dp = units["ep_dp"]
        if m.is_moe:
            self._c_etok = units["expert_row"] * beta["inv_cee"]
            self._c_etouch = units["expert_touch_compute"] * beta["he_inv_cee"]
            self._m_etouch = units["expert_touch_bytes"] * beta["inv_me"]
            self._n_experts = float(m.num_experts)
            self._skewed = k.routing_skew > 0.0
            probs = inclusion_probabilities(m.num_experts, m.experts_per_token, k.routing_skew)
            self._miss = [(1.0 - p) ** ep_dp for p in probs]
            self._q = self._miss[0]
            self._touched_cache: dict[int, float] = {}
        else:
            self._c_etok = self._c_etouch = self._m_etouch = self._n_experts = 0.0
            self._skewed = False
        self._c_ppair = units["attn_pair"] * beta["inv_ae"]
        self._c_dpair = units["attn_dpair"] * beta["inv_ae"]
        self._c_win = units["attn_win"] * beta["inv_ae"]
        # KV reads in vLLM's paged attention: paged_kv_read_factor x the stand-in's (serving only)
        kv_read = beta["inv_me"] * k.paged_kv_read_factor
        self._m_kv = units["kv"] * kv_read
        self._m_win_ptok = units["kv_win"] * kv_read
        self._m_win_dseq = units["kv_win"] * units["window"] * kv_read
        # per token: activations and the FP8 quantisation's per-element part; per step: layers, quant calls
        self._tok = (
            units["act_h"] * beta["act_h"] + units["act_i"] * beta["act_i"] + units["act_r"] * beta["act_r"]
            + units["quant_tok"]
        )
        # vLLM's fused MoE launches FUSED_MOE_SHARE of the stand-in's per-MoE-layer kernels (serving only: <= 0)
        moe_share = FUSED_MOE_SHARE if serving.fused_moe else 1.0
        self._fused_moe_us = units["moe_layers"] * beta["moe_layer"] * (moe_share - 1.0)
        self._layers = (
            units["layers"] * beta["layer"] + units["moe_layers"] * beta["moe_layer"] + units["quant_fixed"] + self._fused_moe_us
        )
        # expert-parallel all-to-alls (the TP all-reduces are the serving layer's)
        self._a0, self._a_tok = communication(m, hw, 1, ep_dp, k.all_reduce_latency_us)
        self.serving = ServingLayer(
            serving, ctx, k.all_reduce_latency_us, ctx.async_scheduling, k.all_reduce_link_efficiency, k.all_reduce_two_shot_us,
            (k.all_reduce_nccl_fixed_us, k.all_reduce_nccl_step_us, k.all_reduce_nccl_bus_efficiency),
            (k.all_reduce_pcie_fixed_us, k.all_reduce_pcie_efficiency),
        )
        self._overlap = self.serving.overlap
        self._sample_row = m.vocab_size * k.sampler_bytes_per_logit / (hw.hbm_bw_tbps * 1e6) * beta["inv_me"]
        self._sample_call = float(k.sampler_call_us)
        self._sample_extra = float(k.sampler_extra_rows)
        self._eager = float(m.num_layers) * k.eager_layer_overhead_us
        self._host = float(k.step_overhead_us)
        self._per_seq = float(k.sequence_overhead_us)
        self._decode_consts: dict[int, tuple[float, float, float, float]] = {}
        self._serving_cache: dict[int, tuple[float, float, float, float, float]] = {}
        self._mixed_cache: dict[tuple[int, int], tuple[float, float, float, float, float, float]] = {}

    # ---- the terms ---------------------------------------------------------------------------
    def touched(self, tokens: int) -> float:
        """Experts one MoE layer activates for ``tokens`` tokens (counting all dp engines' under EP)."""
        if not self._skewed:
            return self._n_experts * (1.0 - self._q**tokens)
        got = self._touched_cache.get(tokens)
        if got is None:
            got = self._touched_cache[tokens] = sum(1.0 - q**tokens for q in self._miss)
        return got

    def _matmuls(self, tokens: int, sampled: int, routed: int = -1) -> float:
        """The matmuls of ``tokens`` rows with ``sampled`` logit rows; ``routed``: the tokens whose
        routing touches experts (default all; CUDA-graph padding rows are identical and add none)."""
        us = 0.0
        for c, ch, mem in self._dense:
            t = c * tokens + ch
            us += t if t > mem else mem
        c, ch, mem = self._lm
        t = c * sampled + ch
        us += t if t > mem else mem
        if self._moe:
            e = self.touched(tokens if routed < 0 else routed)
            t = self._c_etok * tokens + self._c_etouch * e
            mem = self._m_etouch * e
            us += t if t > mem else mem
        return us

    def _rows(self, tokens: int, sampled: int, routed: int = -1) -> float:
        """The context-free GPU time of a step's ``tokens`` rows: matmuls, per-token kernels, collectives."""
        return self._matmuls(tokens, sampled, routed) + self._tok * tokens + self.serving.collectives_us(tokens)

    def terms(self, tokens: int, seqs: int) -> tuple[float, float, float, float, float, float]:
        """A step of ``tokens`` rows and ``seqs`` sequences (each sampled once): its context-free GPU
        time with the serving terms (no attention), and those terms: (gpu us, padding us, eager launch
        gaps us, collectives us, sampling us, exposed host us). A decode batch's are cached
        (:meth:`_decode_batch`)."""
        padded = self.serving.padded(tokens)
        base = self._rows(tokens, seqs) if tokens else 0.0
        gpu = self._rows(padded, seqs, tokens) if padded != tokens else base
        pad = gpu - base
        sampler = self._sample_row * (seqs + self._sample_extra) + self._sample_call if seqs else 0.0
        eager = 0.0 if self.serving.captured(tokens) else self._eager
        gpu += eager + sampler + self._layers + self._a0 + self._a_tok * tokens
        host = self._host + self._per_seq * seqs
        if self._overlap:
            host = host - gpu if host > gpu else 0.0
        return gpu, pad, eager, self.serving.collectives_us(tokens), sampler, host

    def step_terms(self, tokens: int, seqs: int) -> tuple[float, float, float, float, float]:
        """The serving terms of a step (padding, eager launch gaps, collectives, sampling, exposed host us), by
        :meth:`terms`; a decode batch's (``tokens == seqs``) cached: the instance sums them per plan."""
        if tokens == seqs:
            got = self._serving_cache.get(tokens)
            if got is None:
                got = self._serving_cache[tokens] = self.terms(tokens, seqs)[1:]
            return got
        return self._mixed_terms(tokens, seqs)[1:]

    def _mixed_terms(self, tokens: int, seqs: int) -> tuple[float, float, float, float, float, float]:
        """:meth:`terms` of a step with prefill work, kept for the instance's tally of the same step."""
        key = (tokens, seqs)
        got = self._mixed_cache.get(key)
        if got is None:
            if len(self._mixed_cache) > 4096:
                self._mixed_cache.clear()
            got = self._mixed_cache[key] = self.terms(tokens, seqs)
        return got

    def _decode_batch(self, b: int) -> tuple[float, float, float, float]:
        cached = self._decode_consts.get(b)
        if cached is None:
            gpu, _, _, _, _, host = self.terms(b, b)
            cached = self._decode_consts[b] = (gpu, self._c_win * b, self._m_win_dseq * b, host + 0.5)
        return cached

    def step_time(self, p_tok: int, p_pairs: int, p_kv: int, d_seqs: int, d_ctx: int, p_seqs: int = 0) -> int:
        if p_tok:
            tokens = p_tok + d_seqs
            seqs = d_seqs + (p_seqs or 1)
            att_c = self._c_dpair * d_ctx + self._c_win * d_seqs
            att_m = self._m_kv * d_ctx + self._m_win_dseq * d_seqs
            serial = self._c_ppair * p_pairs + self._c_win * p_tok + self._m_kv * p_kv + self._m_win_ptok * p_tok
            t = self._mixed_terms(tokens, seqs)
            us = math.floor((((att_c if att_c > att_m else att_m) + serial) + t[0]) + (t[5] + 0.5))
        else:
            lin, att_c0, att_m0, tail = self._decode_batch(d_seqs)
            att_c = d_ctx * self._c_dpair + att_c0
            att_m = d_ctx * self._m_kv + att_m0
            us = math.floor(((att_c if att_c > att_m else att_m) + lin) + tail)
        return us if us > 1 else 1

    def step_us(self, shape: StepShape) -> int:
        return self.step_time(*shape)

    # ---- diagnostics and the fit -------------------------------------------------------------
    def basis(self, shape: StepShape) -> tuple[list[tuple[dict[str, float], dict[str, float]]], dict[str, float], float]:
        """The step's GPU time as linear terms: (pairs, additive, fixed) where each pair is the two
        sides of a max as {linear coefficient: us at 1}, ``additive`` the terms outside any max and
        ``fixed`` the microseconds with no coefficient (FP8 quantisation). At this model's linear values
        (:func:`linear_of`) they sum to :meth:`kernel_us` (the GPU time less the collectives)."""
        p_tok, p_pairs, p_kv, d_seqs, d_ctx, p_seqs = shape
        tokens = p_tok + d_seqs
        sampled = d_seqs + (p_seqs or (1 if p_tok else 0))
        u = self._units
        pairs: list[tuple[dict[str, float], dict[str, float]]] = []
        if tokens:
            for c, b in u["dense"]:
                if c or b:
                    pairs.append(({"inv_ce": c * tokens, "h_inv_ce": c}, {"inv_me": b}))
            c, b = u["lm_head"]
            pairs.append(({"inv_ce": c * sampled, "h_inv_ce": c}, {"inv_me": b}))
            if self._moe:
                e = self.touched(tokens)
                pairs.append(
                    (
                        {"inv_cee": u["expert_row"] * tokens, "he_inv_cee": u["expert_touch_compute"] * e},
                        {"inv_me": u["expert_touch_bytes"] * e},
                    )
                )
        win_d = u["attn_win"] * d_seqs
        win_m = u["kv_win"] * u["window"] * d_seqs
        pairs.append(({"inv_ae": u["attn_dpair"] * d_ctx + win_d}, {"inv_me": u["kv"] * d_ctx + win_m}))
        add = {
            "inv_ae": u["attn_pair"] * p_pairs + u["attn_win"] * p_tok,
            "inv_me": u["kv"] * p_kv + u["kv_win"] * p_tok,
            "act_h": u["act_h"] * tokens,
            "act_i": u["act_i"] * tokens,
            "act_r": u["act_r"] * tokens,
            "layer": u["layers"],
            "moe_layer": u["moe_layers"],
        }
        fixed = u["quant_tok"] * tokens + u["quant_fixed"]
        return pairs, add, fixed

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """The step's terms in microseconds (diagnostics and tests; not on the hot path)."""
        pairs, add, fixed = self.basis(shape)
        b = self._beta
        val = lambda d: sum(b[k] * v for k, v in d.items())  # noqa: E731
        sides = [(val(a), val(m)) for a, m in pairs]
        tokens = shape.prefill_tokens + shape.decode_seqs
        experts = self._moe and tokens > 0
        n_dense = len(pairs) - 1 - experts  # the dense precisions and the lm_head
        out = {
            "dense_compute_us": sum(c for c, _ in sides[:n_dense]),
            "dense_memory_us": sum(m for _, m in sides[:n_dense]),
            "matmul_us": sum(max(c, m) for c, m in sides[:-1]),
            "expert_compute_us": sides[n_dense][0] if experts else 0.0,
            "expert_memory_us": sides[n_dense][1] if experts else 0.0,
            "decode_attention_us": max(sides[-1]),
            "prefill_attention_us": b["inv_ae"] * add["inv_ae"] + b["inv_me"] * add["inv_me"],
            "activations_us": sum(b[x] * add[x] for x in ("act_h", "act_i", "act_r")),
            "layers_us": b["layer"] * add["layer"] + b["moe_layer"] * add["moe_layer"],
            "fp8_quant_us": fixed,
        }
        _, padding, eager, collectives, sampler, host = self.terms(tokens, shape.sequences)
        f = self.coefficients.paged_kv_read_factor
        d_c, d_m = sides[-1]
        kv_m = b["inv_me"] * add["inv_me"]
        out.update(
            paged_kv_us=(max(d_c, d_m * f) - max(d_c, d_m)) + kv_m * (f - 1.0), fused_moe_us=self._fused_moe_us,
            all_reduce_us=collectives + self._a0 + self._a_tok * tokens, padding_us=padding, eager_us=eager, sampler_us=sampler,
            host_us=host, host_work_us=self._host + self._per_seq * shape.sequences,
        )
        out["kernel_us"] = sum(max(c, m) for c, m in sides) + sum(b[x] * v for x, v in add.items()) + fixed
        return out

    def kernel_us(self, shape: StepShape) -> float:
        """GPU time without collectives or host: what one GPU's kernels take (the step tables)."""
        return self.breakdown(shape)["kernel_us"]

    def gpu_step_us(self, shape: StepShape) -> float:
        """The step's GPU time at the batch's own size: the kernels and the collectives (no padding,
        sampling or host: ``step_us`` adds those)."""
        t = self.breakdown(shape)
        return t["kernel_us"] + t["all_reduce_us"]


def _dense_weights(m: Any, tp: int) -> tuple[float, float, float, float]:
    """Params and bytes per GPU of every dense weight but the lm_head and the embedding, split by
    precision: (bf16 params, bf16 bytes, FP8 params, FP8 bytes)."""
    n, n_moe = m.num_layers, m.num_moe_layers
    n_dense = n - n_moe
    kv_share = m.kv_heads_per_gpu(tp) / m.num_kv_heads
    groups = (  # (params per GPU, bytes per param)
        (n * m.attn_sharded_params / tp, _width(m, m.attn_weight_bytes)),
        (n * m.kv_proj_params * kv_share, _width(m, m.kv_proj_weight_bytes)),
        (n * m.layer_replicated_params, _width(m, m.layer_replicated_weight_bytes)),
        (n_dense * m.dense_mlp_params / tp, _width(m, m.dense_mlp_weight_bytes)),
        (n_moe * m.shared_expert_params / tp, _width(m, m.shared_expert_weight_bytes)),
        (n_moe * m.router_params, _width(m, m.router_weight_bytes)),
        (m.final_norm_params, float(m.dtype_bytes)),
    )
    w16 = b16 = w8 = b8 = 0.0
    for params, width in groups:
        if m.fp8_matmuls and width < 1.5:
            w8, b8 = w8 + params, b8 + params * width
        else:
            w16, b16 = w16 + params, b16 + params * width
    return w16, b16, w8, b8


def _units(ctx: LatencyContext) -> dict[str, Any]:
    """Per-unit costs (us at coefficient 1) of one GPU of the model: what :class:`Roofline3Latency`
    multiplies by its coefficients, and what the fit's design matrix is made of."""
    m, hw, tp = ctx.model, ctx.hardware, ctx.tensor_parallel_size
    us = 1e6
    bw = hw.hbm_bw_tbps * 1e12
    peak16 = hw.bf16_tflops * 1e12
    fp8_peak = hw.matmul_tflops(True) * 1e12
    fp8 = m.fp8_matmuls
    n, n_moe = m.num_layers, m.num_moe_layers
    n_dense = n - n_moe
    w16, b16, w8, b8 = _dense_weights(m, tp)
    lm_params = (m.lm_head_params or m.embed_params) / tp
    lm_width = _width(m, m.lm_head_weight_bytes)
    lm_peak = fp8_peak if fp8 and lm_width < 1.5 else peak16
    ep_dp = ctx.data_parallel_size if ctx.expert_parallel and m.is_moe else 1
    out: dict[str, Any] = {
        "dense": [(2 * w16 / peak16 * us, b16 / bw * us), (2 * w8 / fp8_peak * us, b8 / bw * us)],
        "lm_head": (2 * lm_params / lm_peak * us, lm_params * lm_width / bw * us),
        "ep_dp": ep_dp,
        "attn_pair": m.attn_flops_per_pair() / tp / peak16 * us,
        "attn_dpair": m.attn_flops_per_decode_pair() / tp / peak16 * us,
        "attn_win": m.attn_window_flops_per_token() / tp / peak16 * us,
        "kv": m.kv_bytes_per_token_per_gpu(tp) / bw * us,
        "kv_win": m.window_kv_bytes_per_token_per_gpu(tp) / bw * us,
        "window": float(m.sliding_window),
        "layers": float(n),
        "moe_layers": float(n_moe),
    }
    moe_inter = m.experts_per_token * m.moe_intermediate_size + m.shared_expert_params / (3 * m.hidden_size) if m.is_moe else 0.0
    out["act_h"] = n * m.hidden_size / bw * us
    out["act_i"] = (n_dense * m.intermediate_size + n_moe * moe_inter) / tp / bw * us
    out["act_r"] = n_moe * m.experts_per_token * m.hidden_size / bw * us
    if m.is_moe:
        e_peak = fp8_peak if fp8 and m.expert_weight_bytes < 1.5 else peak16
        e_params = m.expert_params / tp
        out["expert_row"] = 2 * n_moe * m.experts_per_token * e_params / e_peak * us
        out["expert_touch_compute"] = 2 * n_moe * e_params / e_peak * us / ep_dp
        out["expert_touch_bytes"] = n_moe * e_params * m.expert_weight_bytes / bw * us / ep_dp
    q_elems, q_calls = _fp8_quantised_inputs(m, tp) if fp8 else (0.0, 0.0)
    out["quant_tok"] = q_elems * FP8_QUANT_BYTES_PER_ELEMENT / bw * us
    out["quant_fixed"] = q_calls * FP8_QUANT_CALL_US
    return out


def _fp8_quantised_inputs(m: Any, tp: int) -> tuple[float, float]:
    """FP8 W8A8: each quantised matmul's input is quantised per token; returns (elements per token,
    quantisation kernels per step) over the layers whose weights are FP8."""
    n, n_moe = m.num_layers, m.num_moe_layers
    n_dense = n - n_moe
    q_elems = q_calls = 0.0
    q_dim = m.num_attention_heads * m.head_dim / tp
    if _width(m, m.attn_weight_bytes) < 1.5:
        q_elems, q_calls = q_elems + n * (m.hidden_size + q_dim), q_calls + 2 * n
    if n_dense and _width(m, m.dense_mlp_weight_bytes) < 1.5:
        q_elems, q_calls = q_elems + n_dense * (m.hidden_size + m.intermediate_size / tp), q_calls + 2 * n_dense
    if n_moe and m.shared_expert_params and _width(m, m.shared_expert_weight_bytes) < 1.5:
        shared_i = m.shared_expert_params / (3 * m.hidden_size)
        q_elems, q_calls = q_elems + n_moe * (m.hidden_size + shared_i / tp), q_calls + 2 * n_moe
    if n_moe and m.expert_weight_bytes < 1.5:
        k_i = m.experts_per_token * m.moe_intermediate_size / tp
        q_elems, q_calls = q_elems + n_moe * (m.hidden_size + k_i), q_calls + 2 * n_moe
    return q_elems, q_calls


def coefficients_from(cfg: Any, defaults: Roofline3Coefficients = DEFAULTS) -> Roofline3Coefficients:
    """The coefficients a ``cluster.latency`` node sets, the defaults for those it leaves null."""
    return roofline.coefficients_from(cfg, defaults, BOUNDS)


SAMPLER_TERMS = ("sampler_call_us", "sampler_bytes_per_logit", "sampler_extra_rows")


def gpu_defaults(hw: Any) -> Roofline3Coefficients:
    """The shipped coefficients on GPU ``hw``: :data:`DEFAULTS` with what the catalog says the GPU
    achieves (hardware.json's ``achieved``, each value with its source) in place of the H100 fit's."""
    return replace(DEFAULTS, **dict(hw.achieved)) if hw.achieved else DEFAULTS


@register_latency_model("roofline3")
def _build(cfg: Any, ctx: LatencyContext) -> Roofline3Latency:
    ctx.model.check_tensor_parallel(ctx.tensor_parallel_size)
    serving = settings_from(cfg)
    # the sampling path's measured terms, for those the config leaves null
    path = dict(zip(SAMPLER_TERMS, SAMPLERS[sampler_path(serving.sampler, ctx.model.name, dict(ctx.model.generation_defaults))]))
    base = gpu_defaults(ctx.hardware)
    defaults = replace(base, **{k: v for k, v in path.items() if cfg is None or cfg.get(k) is None})
    return Roofline3Latency(ctx, coefficients_from(cfg, defaults), serving)
