"""Linear step-time model: step = base_us + per_prefill_token_us x prefill tokens
+ per_decode_token_us x decode tokens.

The form a fitted profile takes (Vidur and BLIS fit similar models to measured steps). With
max_num_seqs=1 and fixed lengths it makes each request's service time exact:
(base + per_prefill x P) + (D - 1) x (base + per_decode).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, LatencyModel, StepShape
from distsim.instance.latency.registry import register_latency_model


class LinearLatency(LatencyModel):
    def __init__(self, base_us: float, per_prefill_token_us: float, per_decode_token_us: float):
        self.base_us = float(base_us)
        self.per_prefill_token_us = float(per_prefill_token_us)
        self.per_decode_token_us = float(per_decode_token_us)

    def step_us(self, shape: StepShape) -> int:
        x = self.base_us + self.per_prefill_token_us * shape.prefill_tokens + self.per_decode_token_us * shape.decode_seqs
        return math.floor(x + 0.5)

    def decode_steps_us(self, decode_seqs: int, decode_ctx0: int, count: int) -> np.ndarray:
        x = self.base_us + self.per_prefill_token_us * 0 + self.per_decode_token_us * decode_seqs
        return np.full(count, math.floor(x + 0.5), dtype=np.int64)

    def decode_steps(self, decode_seqs: int, decode_ctx0: int, count: int) -> list[int]:
        x = self.base_us + self.per_prefill_token_us * 0 + self.per_decode_token_us * decode_seqs
        return [math.floor(x + 0.5)] * count

    def decode_run_ends(self, decode_seqs: int, decode_ctx0: int, count: int, begin_us: int) -> list[int]:
        step = self.decode_steps(decode_seqs, decode_ctx0, 1)[0]
        return [begin_us + step * j for j in range(1, count + 1)]


@register_latency_model("linear")
def _build(cfg: Any, ctx: LatencyContext) -> LinearLatency:
    values = {}
    for key in ("base_us", "per_prefill_token_us", "per_decode_token_us"):
        v = cfg.get(key)
        if v is None:
            raise ConfigError(f"cluster.latency.{key}", "required by the linear latency model")
        if not math.isfinite(v) or v < 0:
            raise ConfigError(f"cluster.latency.{key}", f"must be a finite number >= 0 (got {v})")
        values[key] = v
    if values["base_us"] + values["per_decode_token_us"] <= 0 or values["base_us"] + values["per_prefill_token_us"] <= 0:
        raise ConfigError("cluster.latency.base_us", "a step must take time: base_us or the per-token terms must be > 0")
    return LinearLatency(**values)
