"""Roofline step-time model: each operator class takes as long as its slower resource; a step runs them
one after the other, plus communication and overhead.

For a step of shape (prefill_tokens P, prefill_attn_pairs A, prefill_kv_tokens K, decode_seqs D,
decode_ctx C) on one instance of ``tp`` GPUs, with T = P + D tokens:

step = max(linear compute, linear memory) + max(attention compute, attention memory) + all-reduce + overhead

The two operator classes are separate kernels (the projections and MLP are matmuls over the weights;
attention reads each sequence's KV), so a step pays both: a chunk of prompt makes the matmuls
compute-bound while the decodes batched with it keep attention bound by their KV reads. One max over
the summed FLOPs and bytes would hide those reads behind the matmuls (LLM-Viewer and GenZ apply the
roofline per operator for the same reason).

linear compute (us)    = [F_lin' x P + F_lin x D] / (tp x peak x compute_eff)
linear memory (us)     = W(T) / (bandwidth x memory_eff)
attention compute (us) = [F_win x T + F_pair x A + F_dpair x C] / (tp x peak x compute_eff)
attention memory (us)  = [kv_tok x (C + K) + kv_win x (P + window x D)] / (bandwidth x memory_eff)
    F_lin     matmul FLOPs per token, 2 x active matmul weights incl. lm_head (ModelSpec.linear_flops_per_token)
    F_lin'    the same without lm_head: vLLM computes logits only at sampled positions, not for every
              prompt token (one lm_head per finished prompt is left out: under 1 token's worth)
    F_win     sliding-window attention per token, upper bound of a full window (gpt-oss; 0 otherwise)
    F_pair    attention FLOPs per query-key pair, 4 x heads x head_dim per full layer (MLA: materialised form)
    F_dpair   the same for decode queries (MLA decodes in the weight-absorbed form over the latent)
    peak      HardwareSpec.bf16_tflops (dense); compute_eff defaults to the catalog's per-GPU default
              (BLIS prefill MFU where published or of the same architecture, else H100's; never
              fitted to a measured run: fitted values live in latency profiles; SOURCES.md)
    W(T)      weight bytes read per GPU: every weight but the untied input embedding table (a step gathers
              only its tokens' rows; a tied table is read whole as the LM head); for MoE the non-expert
              weights plus per MoE layer the expected distinct experts E x (1 - (1 - k/E)^T)
              (ModelSpec.expected_experts_touched)
    kv_tok    KV bytes per token per GPU over the full-attention layers (K/V heads sharded over TP)
    kv_win    the same over sliding-window layers; a decode reads one window, a prefill chunk its own tokens
    memory_eff defaults to 0.8, aiconfigurator's mem_bw_empirical_scaling_factor
all-reduce (us) = 0 when tp == 1, else 2 x num_layers x (latency + 2 (tp-1)/tp x T x hidden x dtype / link)
    two all-reduces per layer (after attention and after the MLP) of the T x hidden activations, ring
    algorithm; latency 10 us per all-reduce (aiconfigurator's p2p_latency_s in shared/data/hardware.json);
    link = HardwareSpec.link_gbps_per_dir. Not overlapped with compute.
overhead (us) = step_overhead_us, default 500: BLIS's TOverheadMicros for vLLM's per-step CPU work
    (scheduling, input preparation, sampling; inference-sim/inference-sim hardware_config.json). Why a
    constant matters: vLLM's profiling of v0.5.3 found scheduling and input preparation took 29% of
    Llama-3-8B's serving time on an H100 (vLLM blog, 2024-09-05); later versions overlap much of it
    with the GPU, so the exposed part is a fraction of a millisecond per step.

step_us = max(1, floor(step + 0.5)).

compute_efficiency, memory_efficiency and step_overhead_us come from ``cluster.latency.*``, else from a
latency profile fitted to measured runs (``cluster.latency.profile``; ``python -m distsim.calibrate``;
docs/fidelity.md), else from the defaults above.

In a run of decode-only steps only the context grows (by the batch size each step): the linear layers'
time is fixed and attention's is max(fixed + rate x context, fixed + rate x context), so the run is a
few in-place array operations.

All constants are folded into per-unit coefficients at construction so :meth:`step_us` is a few float
operations; :meth:`decode_steps_us` repeats exactly the same operations in the same order in numpy, so
both agree to the last bit (tests/test_roofline.py checks it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, LatencyModel, StepShape
from distsim.instance.latency.registry import register_latency_model

DEFAULT_STEP_OVERHEAD_US = 500.0  # BLIS hardware_config.json TOverheadMicros (see module docstring)
ALL_REDUCE_LATENCY_US = 10.0  # aiconfigurator p2p_latency_s = 1e-05 (shared/data/hardware.json)


class RooflineLatency(LatencyModel):
    """Step times from the model's FLOPs and bytes and the GPU's peaks (see the module docstring)."""

    def __init__(
        self,
        ctx: LatencyContext,
        compute_efficiency: float,
        memory_efficiency: float,
        step_overhead_us: float = DEFAULT_STEP_OVERHEAD_US,
        all_reduce_latency_us: float = ALL_REDUCE_LATENCY_US,
    ):
        m, hw, tp = ctx.model, ctx.hardware, ctx.tensor_parallel_size
        self.tp = tp
        us_per_flop = 1e6 / (hw.bf16_tflops * 1e12 * compute_efficiency * tp)
        us_per_byte = 1e6 / (hw.hbm_bw_tbps * 1e12 * memory_efficiency)
        self._c_win = m.attn_window_flops_per_token() * us_per_flop
        self._c_ptok = m.linear_flops_per_token(include_lm_head=False) * us_per_flop
        self._c_dtok = m.linear_flops_per_token() * us_per_flop
        self._c_ppair = m.attn_flops_per_pair() * us_per_flop
        self._c_dpair = m.attn_flops_per_decode_pair() * us_per_flop

        self._moe = m.is_moe
        if m.is_moe:
            self._m_fixed = (m.non_expert_weight_bytes_per_gpu(tp) - m.unread_embedding_bytes_per_gpu(tp)) * us_per_byte
            self._m_expert = m.num_moe_layers * m.num_experts * m.expert_bytes_per_gpu(tp) * us_per_byte
            self._q = 1.0 - m.experts_per_token / m.num_experts
        else:
            self._m_fixed = m.weight_bytes_read_per_gpu(tp, 1) * us_per_byte
            self._m_expert = 0.0
            self._q = 1.0
        self._m_kv = m.kv_bytes_per_token_per_gpu(tp) * us_per_byte
        win_tok = m.window_kv_bytes_per_token_per_gpu(tp) * us_per_byte
        self._m_win_ptok = win_tok
        self._m_win_dseq = win_tok * m.sliding_window

        if tp > 1:
            n_ar = 2 * m.num_layers
            ring = 2.0 * (tp - 1) / tp
            self._a0 = n_ar * all_reduce_latency_us
            self._a_tok = n_ar * ring * m.hidden_size * m.dtype_bytes / (hw.link_gbps_per_dir * 1e9) * 1e6
        else:
            self._a0 = 0.0
            self._a_tok = 0.0
        self._overhead = float(step_overhead_us)
        self._decode_consts: dict[int, tuple[float, float, float, float]] = {}  # decode seqs -> per-batch terms

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """The terms of one step in microseconds (for tests and diagnostics; not on the hot path)."""
        p_tok, p_pairs, p_kv, d_seqs, d_ctx, _ = shape
        tokens = p_tok + d_seqs
        lin_c, lin_m = self._linear(p_tok, d_seqs, tokens)
        att_c, att_m = self._attention(p_tok, p_pairs, p_kv, d_seqs, d_ctx)
        return {
            "linear_compute_us": lin_c,
            "linear_memory_us": lin_m,
            "attention_compute_us": att_c,
            "attention_memory_us": att_m,
            "compute_us": lin_c + att_c,
            "memory_us": lin_m + att_m,
            "all_reduce_us": self._a0 + self._a_tok * tokens,
            "overhead_us": self._overhead,
        }

    def gpu_step_us(self, shape: StepShape) -> float:
        """The step's GPU time in microseconds, unrounded: every term but the host-side (CPU) overheads.
        What a kernel-level measurement of one forward pass (``../shared/data/h100_steps``) compares to."""
        parts = self.breakdown(shape)
        return (
            max(parts["linear_compute_us"], parts["linear_memory_us"])
            + max(parts["attention_compute_us"], parts["attention_memory_us"])
            + parts["all_reduce_us"]
        )

    def _weights(self, tokens: int) -> float:
        return self._m_fixed + self._m_expert * (1.0 - self._q**tokens) if self._moe else self._m_fixed

    def _linear(self, p_tok: int, d_seqs: int, tokens: int) -> tuple[float, float]:
        return self._c_ptok * p_tok + self._c_dtok * d_seqs, self._weights(tokens)

    def _attention(self, p_tok: int, p_pairs: int, p_kv: int, d_seqs: int, d_ctx: int) -> tuple[float, float]:
        compute = self._c_win * (p_tok + d_seqs) + self._c_ppair * p_pairs + self._c_dpair * d_ctx
        memory = self._m_kv * (d_ctx + p_kv) + self._m_win_ptok * p_tok + self._m_win_dseq * d_seqs
        return compute, memory

    def _decode_batch(self, b: int) -> tuple[float, float, float, float]:
        """The parts of a decode-only step of ``b`` sequences that do not depend on its context:
        the linear layers' time (us), the attention's context-free compute and bytes terms (us), and
        all-reduce plus overhead plus the rounding half (us)."""
        cached = self._decode_consts.get(b)
        if cached is None:
            lin_c, lin_m = self._linear(0, b, b)
            lin = lin_c if lin_c > lin_m else lin_m
            tail = (self._a0 + self._a_tok * b) + self._overhead + 0.5
            cached = self._decode_consts[b] = (lin, self._c_win * b, self._m_win_dseq * b, tail)
        return cached

    def step_us(self, shape: StepShape) -> int:
        p_tok, p_pairs, p_kv, d_seqs, d_ctx, _ = shape
        if p_tok:
            tokens = p_tok + d_seqs
            lin_c, lin_m = self._linear(p_tok, d_seqs, tokens)
            att_c, att_m = self._attention(p_tok, p_pairs, p_kv, d_seqs, d_ctx)
            tail = (self._a0 + self._a_tok * tokens) + self._overhead + 0.5
            us = math.floor(((att_c if att_c > att_m else att_m) + (lin_c if lin_c > lin_m else lin_m)) + tail)
        else:
            lin, att_c0, att_m0, tail = self._decode_batch(d_seqs)
            att_c = d_ctx * self._c_dpair + att_c0
            att_m = d_ctx * self._m_kv + att_m0
            us = math.floor(((att_c if att_c > att_m else att_m) + lin) + tail)
        return us if us > 1 else 1

    def decode_steps(self, decode_seqs: int, decode_ctx0: int, count: int) -> list[int]:
        if count > 48:
            return self.decode_steps_us(decode_seqs, decode_ctx0, count).tolist()
        b = int(decode_seqs)
        lin, att_c0, att_m0, tail = self._decode_batch(b)
        c_pair = self._c_dpair
        m_kv = self._m_kv
        floor = math.floor
        out = []
        ctx = float(decode_ctx0)
        for _ in range(count):
            # the same operations, in the same order, as decode_steps_us's array arithmetic
            att_c = ctx * c_pair + att_c0
            att_m = ctx * m_kv + att_m0
            us = floor(((att_c if att_c > att_m else att_m) + lin) + tail)
            out.append(us if us > 1 else 1)
            ctx += b
        return out

    def decode_steps_us(self, decode_seqs: int, decode_ctx0: int, count: int) -> np.ndarray:
        b = int(decode_seqs)
        lin, att_c0, att_m0, tail = self._decode_batch(b)
        ctx0 = int(decode_ctx0)
        ctx = np.arange(ctx0, ctx0 + int(count) * b, b, dtype=np.float64) if b else np.full(int(count), float(ctx0))
        att_c = ctx * self._c_dpair
        att_c += att_c0
        ctx *= self._m_kv
        ctx += att_m0
        np.maximum(att_c, ctx, out=att_c)
        att_c += lin
        att_c += tail
        np.floor(att_c, out=att_c)
        out = att_c.astype(np.int64)
        if tail < 1.5:  # only a step with no overhead could round below one microsecond
            np.maximum(out, 1, out=out)
        return out


def _option(cfg: Any, key: str, default: float, low: float, high: float, low_open: bool) -> float:
    """A ``cluster.latency`` value, or the default when it is null."""
    value = cfg.get(key) if cfg is not None else None
    if value is None:
        return float(default)
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value > high or value < low or (low_open and value == low):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ConfigError(f"cluster.latency.{key}", f"must be a number in {bounds} (got {value!r})")
    return float(value)


@register_latency_model("roofline")
def _build(cfg: Any, ctx: LatencyContext) -> RooflineLatency:
    ctx.model.check_tensor_parallel(ctx.tensor_parallel_size)
    hw = ctx.hardware
    return RooflineLatency(
        ctx,
        compute_efficiency=_option(cfg, "compute_efficiency", hw.compute_efficiency_default, 0.0, 1.0, True),
        memory_efficiency=_option(cfg, "memory_efficiency", hw.memory_efficiency_default, 0.0, 1.0, True),
        step_overhead_us=_option(cfg, "step_overhead_us", DEFAULT_STEP_OVERHEAD_US, 0.0, 1e9, False),
    )
