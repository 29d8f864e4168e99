"""Roofline step-time model: each operator class takes as long as its slower resource; a step runs them
one after the other, plus the GPU work a roofline does not see, communication and the host's share.

For a step of shape (prefill_tokens P, prefill_attn_pairs A, prefill_kv_tokens K, decode_seqs D,
decode_ctx C, prefill_seqs S) on one instance of ``tp`` GPUs, with T = P + D tokens:

step = dense matmuls + expert matmuls + attention + layers + all-reduce + host

dense matmuls  = max([F_lin' P + F_lin D] (T + h) / T / (tp peak_mm ce),  W_dense / (bw me))
expert matmuls = max(F_exp (T + h E_t / k) / (tp peak_mm ce),             E_t W_exp / (bw me))    (MoE only)
attention      = max([F_win T + F_pair A + F_dpair C] / (tp peak ae),      [kv (C + K) + kv_win (P + win D)] / (bw me))
layers         = num_layers x layer_overhead_us
all-reduce     = 0 when tp == 1, else 2 num_layers (latency + 2 (tp-1)/tp T hidden dtype / link)
host           = step_overhead_us + sequence_overhead_us x (D + S)

Why each term (docs/fidelity.md has the measurements behind them):

- **Per operator.** The matmuls are kernels over the weights, attention a kernel over each sequence's
  KV, so a step pays both: a prompt chunk makes the matmuls compute-bound while the decodes batched with
  it keep attention bound by their KV reads (LLM-Viewer and GenZ apply the roofline per operator too).
- **Matmul efficiency depends on the rows.** cuBLAS reaches ``ce`` (compute_efficiency) of the tensor
  peak on large GEMMs (0.64-0.76 of 989 TFLOP/s on an H100 for 512-8192 rows: h100_steps'
  micro_gemm) but less on few rows, where tiles are partly empty. Efficiency ce x M / (M + h)
  (h = gemm_half_tokens: the rows at which half of ce is reached) turns compute time into
  F M (M + h) / M / (peak ce): a fixed h rows' worth of time per matmul on top of the FLOPs.
- **MoE experts are their own GEMMs.** A step's T tokens touch E_t = E (1 - (1 - k/E)^T) experts per
  MoE layer (uniform routing; ModelSpec.expected_experts_touched), each with T k / E_t rows, so the
  expert matmuls pay the few-rows penalty per expert (h E_t / k rows in all) and read only the touched
  experts' weights. Without the split, a prompt's expert FLOPs hide behind the decodes' weight reads
  and MoE prompts look nearly free.
- **Precision.** Weight bytes are those of the checkpoint (bf16, FP8 from ``quantization_config``,
  MXFP4 experts; catalog/models.py). FP8 (W8A8) matmuls run at the GPU's FP8 tensor peak where it has
  one (HardwareSpec.matmul_tflops); attention stays at the bf16 peak (bf16 KV).
- **Attention has its own efficiency** ``ae`` (attention_efficiency): FlashAttention's prefill reaches
  a smaller fraction of the peak than cuBLAS's GEMMs (FA2 160-260 TFLOP/s on an H100 in h100_steps).
- **Layers.** Each layer also runs norms, rotary, activation, KV-cache writes and small kernels whose
  time is mostly launch and latency, not FLOPs or bytes: about 20-25 us per layer on an H100 in
  h100_steps' kernel profiles; a B=1 decode step carries about 0.9 ms of it.
- **Expert parallelism** (``enable_expert_parallel`` with ``data_parallel_size`` dp > 1): vLLM spreads
  whole experts over the tp x dp GPUs, and every MoE layer routes the tokens of all dp engines. The
  model takes the other engines' batches as the size of this one's (vLLM's balancer evens them out), so
  E_t counts dp x T tokens and a GPU holds, reads and computes 1/dp of what tensor parallelism alone
  gives it; two all-to-alls per MoE layer (dispatch and combine) carry each GPU's T k / tp token rows
  to remote experts, (ep-1)/ep of them over the link. Not modelled: the engines' lock-step (vLLM runs
  dummy steps on idle engines and every engine waits for the slowest at each MoE layer).
- **All-reduce.** Two per layer (after attention and after the MLP) over the T x hidden activations,
  ring algorithm, not overlapped with compute; the link is the GPU's (HardwareSpec.link_gbps_per_dir:
  NVLink on SXM boards, PCIe on PCIe cards) with 10 us latency per collective (aiconfigurator's
  p2p_latency_s in shared/data/hardware.json).
- **Host.** vLLM's per-step CPU work (scheduling, input preparation, sampling, output processing) is
  partly exposed: a fixed part per step and a part per scheduled sequence.

F_lin is 2 x the active matmul weights incl. lm_head (ModelSpec.linear_flops_per_token); F_lin' leaves
the lm_head out (vLLM computes logits only at sampled positions); F_exp is the routed experts' share of
F_lin (dense matmuls use the rest); F_pair = 4 heads head_dim per full layer (MLA: materialised),
F_dpair the decode form; F_win sliding-window attention per token (gpt-oss; else 0); W_dense every
weight but the routed experts and the untied input embedding (a step gathers its rows); kv, kv_win KV
bytes per token per GPU over full and sliding-window layers. peak_mm = the tensor peak for the
weights' precision, peak = the bf16 peak, bw = HBM bandwidth.

Coefficients (``cluster.latency.*``; null takes the default): compute_efficiency ce, gemm_half_tokens h,
attention_efficiency ae, memory_efficiency me, layer_overhead_us, sequence_overhead_us,
step_overhead_us. The defaults are one set for every GPU, model and TP degree (only datasheet numbers
differ per GPU), fitted as docs/fidelity.md describes; a latency profile (``cluster.latency.profile``)
fills the coefficients a config leaves null.

step_us = max(1, floor(step + 0.5)). In a run of decode-only steps only the context grows (by the
batch size each step): everything but attention is fixed, so the run is a few in-place array
operations. All constants are folded into per-unit coefficients at construction, so :meth:`step_us` is
a few float operations; :meth:`decode_steps_us` repeats exactly the same operations in the same order
in numpy, so both agree to the last bit (tests/test_roofline.py checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, LatencyModel, StepShape
from distsim.instance.latency.registry import register_latency_model

ALL_REDUCE_LATENCY_US = 10.0  # aiconfigurator p2p_latency_s = 1e-05 (shared/data/hardware.json)


@dataclass(frozen=True)
class RooflineCoefficients:
    """The roofline's free coefficients. The defaults are the shipped fitted set, one for every GPU,
    model and TP degree (docs/fidelity.md, "The step model's defaults"): the GPU terms fitted on the
    dense whole-model steps measured on an H100 (``python -m distsim.fidelity.steps
    ../shared/data/h100_steps --fit compute_efficiency,memory_efficiency,gemm_half_tokens,
    attention_efficiency,layer_overhead_us``); then memory_efficiency, layer_overhead_us and the host
    terms refitted, with the front end's, on the 13 real vLLM runs on H100 (``python -m distsim.calibrate
    --suite ../shared/data/h100_vllm_runs``; docs/data/h100_fit.json)."""

    compute_efficiency: float = 0.602  # h100_steps
    gemm_half_tokens: float = 88.2  # h100_steps
    attention_efficiency: float = 0.365  # h100_steps
    memory_efficiency: float = 0.826  # h100_vllm_runs (0.761 on h100_steps)
    layer_overhead_us: float = 1.14  # h100_vllm_runs (26.0 on h100_steps)
    sequence_overhead_us: float = 5.82  # h100_vllm_runs
    step_overhead_us: float = 864.0  # h100_vllm_runs


DEFAULTS = RooflineCoefficients()
DEFAULT_STEP_OVERHEAD_US = DEFAULTS.step_overhead_us

# name -> (low, high, low bound open): what each coefficient may be
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "compute_efficiency": (0.0, 1.0, True),
    "gemm_half_tokens": (0.0, 1e6, False),
    "attention_efficiency": (0.0, 1.0, True),
    "memory_efficiency": (0.0, 1.0, True),
    "layer_overhead_us": (0.0, 1e6, False),
    "sequence_overhead_us": (0.0, 1e6, False),
    "step_overhead_us": (0.0, 1e9, False),
}


class RooflineLatency(LatencyModel):
    """Step times from the model's FLOPs and bytes and the GPU's peaks (see the module docstring)."""

    def __init__(self, ctx: LatencyContext, coefficients: RooflineCoefficients = DEFAULTS):
        m, hw, tp = ctx.model, ctx.hardware, ctx.tensor_parallel_size
        k = coefficients
        self.tp = tp
        self.coefficients = k
        us_per_mm_flop = 1e6 / (hw.matmul_tflops(m.fp8_matmuls) * 1e12 * k.compute_efficiency * tp)
        us_per_attn_flop = 1e6 / (hw.bf16_tflops * 1e12 * k.attention_efficiency * tp)
        us_per_byte = 1e6 / (hw.hbm_bw_tbps * 1e12 * k.memory_efficiency)
        self._h = float(k.gemm_half_tokens)

        expert_flops = 2 * m.num_moe_layers * m.experts_per_token * m.expert_params if m.is_moe else 0
        self._c_ptok = (m.linear_flops_per_token(include_lm_head=False) - expert_flops) * us_per_mm_flop
        self._c_dtok = (m.linear_flops_per_token() - expert_flops) * us_per_mm_flop
        self._moe = m.is_moe
        # expert parallelism over dp engines: the experts are spread over tp x dp GPUs and each MoE layer
        # routes the tokens of all dp engines (taken as loaded like this one), so E_t counts dp x T tokens
        # and each GPU holds, reads and computes 1/dp of what tensor parallelism alone would give it
        ep_dp = ctx.data_parallel_size if ctx.expert_parallel and m.is_moe else 1
        if m.is_moe:
            self._m_dense = (m.non_expert_weight_bytes_per_gpu(tp) - m.unread_embedding_bytes_per_gpu(tp)) * us_per_byte
            self._c_etok = expert_flops * us_per_mm_flop
            self._c_erows = self._c_etok * self._h / m.experts_per_token / ep_dp  # per touched expert
            self._m_expert = m.num_moe_layers * m.expert_bytes_per_gpu(tp) * us_per_byte / ep_dp  # per touched expert
            self._n_experts = float(m.num_experts)
            self._q = (1.0 - m.experts_per_token / m.num_experts) ** ep_dp
        else:
            self._m_dense = m.weight_bytes_read_per_gpu(tp, 1) * us_per_byte
            self._c_etok = self._c_erows = self._m_expert = self._n_experts = 0.0
            self._q = 1.0

        self._c_win = m.attn_window_flops_per_token() * us_per_attn_flop
        self._c_ppair = m.attn_flops_per_pair() * us_per_attn_flop
        self._c_dpair = m.attn_flops_per_decode_pair() * us_per_attn_flop
        self._m_kv = m.kv_bytes_per_token_per_gpu(tp) * us_per_byte
        win_tok = m.window_kv_bytes_per_token_per_gpu(tp) * us_per_byte
        self._m_win_ptok = win_tok
        self._m_win_dseq = win_tok * m.sliding_window

        self._a0, self._a_tok = communication(m, hw, tp, ep_dp)
        self._layers = m.num_layers * float(k.layer_overhead_us)
        self._host = float(k.step_overhead_us)
        self._per_seq = float(k.sequence_overhead_us)
        self._decode_consts: dict[int, tuple[float, float, float, float]] = {}  # decode seqs -> per-batch terms

    # ---- the terms ---------------------------------------------------------------------------
    def _dense(self, p_tok: int, d_seqs: int, tokens: int) -> tuple[float, float]:
        flops = self._c_ptok * p_tok + self._c_dtok * d_seqs
        return flops + flops * self._h / tokens, self._m_dense

    def _experts(self, tokens: int) -> tuple[float, float]:
        """Compute and weight-read time of the routed experts (MoE), with E_t experts touched."""
        touched = self._n_experts * (1.0 - self._q**tokens)
        return self._c_etok * tokens + self._c_erows * touched, self._m_expert * touched

    def _attention(self, p_tok: int, p_pairs: int, p_kv: int, d_seqs: int, d_ctx: int) -> tuple[float, float]:
        compute = self._c_win * (p_tok + d_seqs) + self._c_ppair * p_pairs + self._c_dpair * d_ctx
        memory = self._m_kv * (d_ctx + p_kv) + self._m_win_ptok * p_tok + self._m_win_dseq * d_seqs
        return compute, memory

    def _matmuls(self, p_tok: int, d_seqs: int, tokens: int) -> float:
        c, m = self._dense(p_tok, d_seqs, tokens)
        us = c if c > m else m
        if self._moe:
            c, m = self._experts(tokens)
            us += c if c > m else m
        return us

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """The terms of one step in microseconds (for tests and diagnostics; not on the hot path)."""
        p_tok, p_pairs, p_kv, d_seqs, d_ctx, _ = shape
        tokens = p_tok + d_seqs
        dense_c, dense_m = self._dense(p_tok, d_seqs, tokens) if tokens else (0.0, 0.0)
        exp_c, exp_m = self._experts(tokens) if self._moe else (0.0, 0.0)
        att_c, att_m = self._attention(p_tok, p_pairs, p_kv, d_seqs, d_ctx)
        return {
            "dense_compute_us": dense_c,
            "dense_memory_us": dense_m,
            "expert_compute_us": exp_c,
            "expert_memory_us": exp_m,
            "linear_compute_us": dense_c + exp_c,
            "linear_memory_us": dense_m + exp_m,
            "attention_compute_us": att_c,
            "attention_memory_us": att_m,
            "compute_us": dense_c + exp_c + att_c,
            "memory_us": dense_m + exp_m + att_m,
            "layers_us": self._layers,
            "all_reduce_us": self._a0 + self._a_tok * tokens,
            "host_us": self._host + self._per_seq * shape.sequences,
        }

    def gpu_step_us(self, shape: StepShape) -> float:
        """The step's GPU time in microseconds, unrounded: every term but the host's. What a
        kernel-level measurement of one forward pass (``../shared/data/h100_steps``) compares to."""
        t = self.breakdown(shape)
        return (
            max(t["dense_compute_us"], t["dense_memory_us"])
            + max(t["expert_compute_us"], t["expert_memory_us"])
            + max(t["attention_compute_us"], t["attention_memory_us"])
            + t["layers_us"]
            + t["all_reduce_us"]
        )

    # ---- the hot path ------------------------------------------------------------------------
    def _decode_batch(self, b: int) -> tuple[float, float, float, float]:
        """The parts of a decode-only step of ``b`` sequences that do not depend on its context:
        the matmuls' time (us), the attention's context-free compute and bytes terms (us), and
        layers plus all-reduce plus host plus the rounding half (us)."""
        cached = self._decode_consts.get(b)
        if cached is None:
            lin = self._matmuls(0, b, b) if b else 0.0
            tail = self._layers + (self._a0 + self._a_tok * b) + (self._host + self._per_seq * b) + 0.5
            cached = self._decode_consts[b] = (lin, self._c_win * b, self._m_win_dseq * b, tail)
        return cached

    def step_us(self, shape: StepShape) -> int:
        return self.step_time(*shape)

    def step_time(self, p_tok: int, p_pairs: int, p_kv: int, d_seqs: int, d_ctx: int, p_seqs: int = 0) -> int:
        if p_tok:
            tokens = p_tok + d_seqs
            att_c, att_m = self._attention(p_tok, p_pairs, p_kv, d_seqs, d_ctx)
            seqs = d_seqs + (p_seqs or 1)
            tail = self._layers + (self._a0 + self._a_tok * tokens) + (self._host + self._per_seq * seqs) + 0.5
            us = math.floor(((att_c if att_c > att_m else att_m) + self._matmuls(p_tok, d_seqs, tokens)) + tail)
        else:
            lin, att_c0, att_m0, tail = self._decode_batch(d_seqs)
            att_c = d_ctx * self._c_dpair + att_c0
            att_m = d_ctx * self._m_kv + att_m0
            us = math.floor(((att_c if att_c > att_m else att_m) + lin) + tail)
        return us if us > 1 else 1

    def decode_run_ends(self, decode_seqs: int, decode_ctx0: int, count: int, begin_us: int) -> list[int]:
        if count > 48:  # numpy's fixed cost pays from about 48 steps on
            return super().decode_run_ends(decode_seqs, decode_ctx0, count, begin_us)
        cached = self._decode_consts.get(decode_seqs)
        lin, att_c0, att_m0, tail = cached if cached is not None else self._decode_batch(decode_seqs)
        c_pair = self._c_dpair
        m_kv = self._m_kv
        floor = math.floor
        out: list[int] = []
        t = begin_us
        ctx = float(decode_ctx0)
        b = float(decode_seqs)  # exact, and float + float is the interpreter's fast path
        if tail >= 1.5 and (decode_ctx0 + (count - 1) * decode_seqs) * c_pair + att_c0 < ctx * m_kv + att_m0:
            # attention is bound by its KV reads at every step (both terms grow with the context and
            # rounding keeps them monotone) and the overheads keep every step over 1 us: the same
            # operations as below, without the comparisons
            for _ in range(count):
                t += floor(((ctx * m_kv + att_m0) + lin) + tail)
                out.append(t)
                ctx += b
            return out
        for _ in range(count):
            # the same operations, in the same order, as decode_steps_us's array arithmetic
            att_c = ctx * c_pair + att_c0
            att_m = ctx * m_kv + att_m0
            us = floor(((att_c if att_c > att_m else att_m) + lin) + tail)
            t += us if us > 1 else 1
            out.append(t)
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
        if tail < 1.5:  # only a step with no overheads could round below one microsecond
            np.maximum(out, 1, out=out)
        return out


def communication(m: Any, hw: Any, tp: int, ep_dp: int, latency_us: float = ALL_REDUCE_LATENCY_US) -> tuple[float, float]:
    """Collectives per step: a fixed part (us) and a part per token (us): TP's two all-reduces per layer,
    and with expert parallelism over ep_dp engines two all-to-alls per MoE layer; ``latency_us`` is the
    fixed time of one collective."""
    fixed = per_token = 0.0
    if tp > 1:
        n_ar = 2 * m.num_layers
        ring = 2.0 * (tp - 1) / tp
        fixed = n_ar * latency_us
        per_token = n_ar * ring * m.hidden_size * m.dtype_bytes / (hw.link_gbps_per_dir * 1e9) * 1e6
    if ep_dp > 1:  # dispatch and combine: each GPU's share of its T tokens x k to remote experts and back
        ep = tp * ep_dp
        fixed += 2 * m.num_moe_layers * latency_us
        remote = m.experts_per_token * m.hidden_size * m.dtype_bytes * (ep - 1) / ep / tp
        per_token += 2 * m.num_moe_layers * remote / (hw.link_gbps_per_dir * 1e9) * 1e6
    return fixed, per_token


def checked_option(cfg: Any, key: str, default: float, bounds: dict[str, tuple[float, float, bool]]) -> float:
    """A ``cluster.latency`` value within its ``bounds[key]``, or the default when it is null."""
    value = cfg.get(key) if cfg is not None else None
    if value is None:
        return float(default)
    low, high, low_open = bounds[key]
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value > high or value < low or (low_open and value == low):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ConfigError(f"cluster.latency.{key}", f"must be a number in {bounds} (got {value!r})")
    return float(value)


def coefficients_from(cfg: Any, defaults: Any = DEFAULTS, bounds: dict[str, tuple[float, float, bool]] = BOUNDS) -> Any:
    """The coefficients a ``cluster.latency`` node sets, the defaults for those it leaves null: a copy of
    ``defaults`` (a coefficients dataclass, this module's or roofline3's) checked against ``bounds``."""
    return replace(defaults, **{f.name: checked_option(cfg, f.name, getattr(defaults, f.name), bounds) for f in fields(defaults)})


@register_latency_model("roofline")
def _build(cfg: Any, ctx: LatencyContext) -> RooflineLatency:
    ctx.model.check_tensor_parallel(ctx.tensor_parallel_size)
    return RooflineLatency(ctx, coefficients_from(cfg))
