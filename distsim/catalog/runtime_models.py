"""Non-LLM models for batching runtimes (``cluster.pools[i].model`` of a ``kind: runtime`` pool): the FLOPs
and weight bytes a roofline service curve needs, from ``data/runtime_models.json`` (sources in SOURCES.md).

Why a catalog of its own: these models have no HF config.json a transformer roofline could read (a CNN, an
encoder-decoder over audio); what a batch costs is the published FLOPs per item and the weights read per
pass, which is all the runtime's roofline (distsim.runtime.curves.roofline) uses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from distsim.errors import ConfigError

_FILE = "runtime_models.json"
MODALITIES = ("vision", "asr")


@dataclass(frozen=True)
class RuntimeModelSpec:
    """One model. ``gflops_per_item``: one item of ``reference_size``; an item of size s costs that times
    (s / reference_size) ** size_exponent. Speech models also decode ``decode_tokens_per_unit`` tokens per
    unit of size, each a pass over ``decoder_step_params`` weights (memory-bound at small batches)."""

    name: str
    modality: str  # the request type it serves by default: vision | asr
    size_unit: str
    params: int
    bytes_per_param: int
    gflops_per_item: float
    reference_size: float
    size_exponent: float
    encoder_params: int | None = None  # weights of the per-item pass (null: every parameter)
    decoder_step_params: int = 0
    decoder_gflops_per_token: float = 0.0
    decode_tokens_per_unit: float = 0.0

    @property
    def pass_bytes(self) -> float:
        """Weights read by the batch's forward pass (encoder, or the whole model)."""
        return float(self.encoder_params or self.params) * self.bytes_per_param

    @property
    def weight_bytes(self) -> float:
        return float(self.params) * self.bytes_per_param


_NUMBERS = ("params", "bytes_per_param", "gflops_per_item", "reference_size")
_OPTIONAL = ("encoder_params", "decoder_step_params", "decoder_gflops_per_token", "decode_tokens_per_unit")


def _parse(name: str, entry: dict[str, Any]) -> RuntimeModelSpec:
    for field in (*_NUMBERS, "size_exponent", *_OPTIONAL):
        value = entry.get(field, 0 if field in _OPTIONAL or field == "size_exponent" else None)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        if not ok or (field in _NUMBERS and value <= 0):
            raise ValueError(f"{_FILE}: {name}.{field} must be a {'positive' if field in _NUMBERS else 'non-negative'} number")
    if entry.get("modality") not in MODALITIES:
        raise ValueError(f"{_FILE}: {name}.modality must be one of {', '.join(MODALITIES)}")
    keep = {k: entry[k] for k in RuntimeModelSpec.__dataclass_fields__ if k in entry and k != "name"}
    return RuntimeModelSpec(name=name, **keep)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, RuntimeModelSpec]:
    text = resources.files("distsim.catalog").joinpath("data", _FILE).read_text(encoding="utf-8")
    return {name: _parse(name, entry) for name, entry in json.loads(text)["models"].items()}


def runtime_model_names() -> list[str]:
    return sorted(_catalog())


def load_runtime_model(name: object, key: str) -> RuntimeModelSpec:
    """The catalog model called ``name`` (case-insensitive); an unknown name is a ConfigError at ``key``."""
    spec = _catalog().get(str(name).lower()) if name is not None else None
    if spec is None:
        raise ConfigError(key, f"unknown runtime model {name!r}; known: {', '.join(runtime_model_names())}")
    return spec
