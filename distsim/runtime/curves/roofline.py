"""``roofline``: a batch's time from the catalog model's FLOPs and weight bytes on the pool's GPU.

    t = overhead + max(B x F(s) / (peak x ce), W / (bw x me))                       the forward pass
          + T(s) x max(B x f_tok / (peak x ce), W_dec / (bw x me))                  speech: decoding

B: items in the batch; s: its largest item's size; F(s) = gflops_per_item x (s / reference_size) ** size_exponent
(an image's work grows with its pixels, exponent 2; Whisper pads every clip to its 30 s window, exponent 0);
W: the weights one pass reads (encoder or whole model, bf16); T(s) = decode_tokens_per_unit x s output tokens,
each a decoder pass reading W_dec and doing f_tok per item. peak: the GPU's bf16 tensor FLOP/s; bw: its memory
bandwidth (catalog). Assumed, not fitted: ce (compute_efficiency) 0.4, me (memory_efficiency) 0.7, overhead
0.5 ms per batch (launch, pre- and post-processing); activations' memory traffic, the decoder's attention
over its own and the audio's keys, and kernel fusion are not priced. Fit a ``table`` curve where it matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim import validators
from distsim.runtime.curves.base import CurveContext, ServiceCurve, to_us
from distsim.runtime.curves.registry import CURVES

DEFAULT_COMPUTE_EFFICIENCY = 0.4
DEFAULT_MEMORY_EFFICIENCY = 0.7
DEFAULT_OVERHEAD_MS = 0.5


@dataclass(frozen=True)
class RooflineCurve(ServiceCurve):
    flops_per_s: float  # achieved: peak x compute efficiency
    bytes_per_s: float  # achieved: bandwidth x memory efficiency
    overhead_s: float
    model: object  # distsim.catalog.runtime_models.RuntimeModelSpec

    def batch_us(self, items: int, size: float) -> int:
        m = self.model
        scale = (size / m.reference_size) ** m.size_exponent if size > 0 else 0.0
        t = self.overhead_s + max(items * m.gflops_per_item * 1e9 * scale / self.flops_per_s, m.pass_bytes / self.bytes_per_s)
        tokens = m.decode_tokens_per_unit * size
        if tokens > 0:
            step = max(items * m.decoder_gflops_per_token * 1e9 / self.flops_per_s,
                       m.decoder_step_params * m.bytes_per_param / self.bytes_per_s)
            t += tokens * step
        return to_us(t * 1000.0)


def _efficiency(key: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    x = validators.positive(key, value)
    return min(x, 1.0) if x <= 1.0 else validators.fraction(key, x)


@CURVES.register("roofline")
def roofline(cfg, ctx: CurveContext) -> RooflineCurve:
    ce = _efficiency(f"{ctx.key}.compute_efficiency", cfg.compute_efficiency, DEFAULT_COMPUTE_EFFICIENCY)
    me = _efficiency(f"{ctx.key}.memory_efficiency", cfg.memory_efficiency, DEFAULT_MEMORY_EFFICIENCY)
    overhead = DEFAULT_OVERHEAD_MS if cfg.overhead_ms is None else validators.non_negative(f"{ctx.key}.overhead_ms", cfg.overhead_ms)
    hw = ctx.hardware
    return RooflineCurve(hw.peak_flops * ce, hw.mem_bw_bytes_per_s * me, overhead / 1000.0, ctx.model)
