"""GPU specs from the shipped catalog (``data/hardware.json``), each number with its source there.

The roofline needs peak dense bf16 FLOP/s, memory bandwidth, the GPU-to-GPU link and the achievable
fractions of the peaks; the capacity derivation needs memory size; cost metrics need a price. The file
is validated on load so that a bad edit fails loudly instead of producing nonsense latencies.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from distsim.errors import ConfigError

_FILE = "hardware.json"
_REQUIRED = (
    "bf16_tflops",
    "hbm_bw_tbps",
    "memory_bytes",
    "link_gbps_per_dir",
    "price_usd_per_gpu_hour",
)


@dataclass(frozen=True)
class HardwareSpec:
    """One GPU. Units: TFLOP/s (1e12), TB/s (1e12 B/s), bytes, GB/s per direction (1e9 B/s), USD/h, W.

    ``gpus_per_node``: how many of these GPUs a node joins with ``link_gbps_per_dir`` (NVLink through
    NVSwitch on HGX boards, PCIe for PCIe cards). Tensor parallelism beyond it would cross the network,
    which the step model does not cost, so larger TP degrees are refused unless the config says the
    nodes are bigger (``cluster.gpus_per_node``, e.g. 72 for a GB200 NVL72 rack)."""

    name: str
    bf16_tflops: float
    hbm_bw_tbps: float
    memory_bytes: int
    link_gbps_per_dir: float
    price_usd_per_gpu_hour: float
    gpus_per_node: int = 8  # GPUs joined by link_gbps_per_dir: the largest tensor-parallel group
    fp8_tflops: float | None = None  # dense FP8 tensor TFLOP/s; None: FP8 matmuls run at bf16_tflops
    host_link_gbps_per_dir: float = 32.0  # GPU <-> host (PCIe) per direction: CPU KV offload transfers
    tdp_w: float | None = None
    aliases: tuple[str, ...] = ()
    # what this GPU achieves of its datasheet, where a measurement says (``achieved`` in hardware.json,
    # each with its source): step-model coefficient -> value; a coefficient not named here takes the
    # step model's shipped value (fitted on the H100 step tables: the datasheet prior)
    achieved: tuple[tuple[str, float], ...] = ()

    @property
    def peak_flops(self) -> float:
        return self.bf16_tflops * 1e12

    def matmul_tflops(self, fp8: bool) -> float:
        """Dense tensor peak for matmuls on weights of this precision (FP8 where the GPU has FP8 cores)."""
        return self.fp8_tflops if fp8 and self.fp8_tflops else self.bf16_tflops

    @property
    def mem_bw_bytes_per_s(self) -> float:
        return self.hbm_bw_tbps * 1e12

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gbps_per_dir * 1e9


def _value(entry: dict[str, Any], field: str, gpu: str) -> Any:
    item = entry.get(field)
    if not isinstance(item, dict) or "value" not in item:
        raise ValueError(f"{_FILE}: {gpu}.{field} must be an object with a 'value'")
    return item["value"]


def _positive(value: object, field: str, gpu: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{_FILE}: {gpu}.{field} must be a positive number (got {value!r})")
    return value


# the step-model coefficients a GPU's ``achieved`` block may set (fractions of its datasheet peaks and
# its per-layer launch floor; distsim.instance.latency.roofline3)
ACHIEVED_TERMS = ("memory_efficiency", "compute_efficiency", "attention_efficiency", "layer_overhead_us", "paged_kv_read_factor")


def _achieved(entry: dict[str, Any], gpu: str) -> tuple[tuple[str, float], ...]:
    block = entry.get("achieved", {})
    if not isinstance(block, dict):
        raise ValueError(f"{_FILE}: {gpu}.achieved must be an object")
    out = []
    for term in sorted(block):
        if term not in ACHIEVED_TERMS:
            raise ValueError(f"{_FILE}: {gpu}.achieved.{term} is not one of {', '.join(ACHIEVED_TERMS)}")
        value = _value(block, term, f"{gpu}.achieved")
        if value is not None:
            out.append((term, float(_positive(value, f"achieved.{term}", gpu))))
    return tuple(out)


def _parse(name: str, entry: dict[str, Any]) -> HardwareSpec:
    v = {f: _positive(_value(entry, f, name), f, name) for f in _REQUIRED}
    if not isinstance(v["memory_bytes"], int):
        raise ValueError(f"{_FILE}: {name}.memory_bytes must be an integer")
    tdp = entry.get("tdp_w", {}).get("value")
    if tdp is not None:
        tdp = _positive(tdp, "tdp_w", name)
    fp8 = _value(entry, "fp8_tflops", name)
    if fp8 is not None:
        fp8 = _positive(fp8, "fp8_tflops", name)
    host = _positive(_value(entry, "host_link_gbps_per_dir", name), "host_link_gbps_per_dir", name)
    per_node = _positive(_value(entry, "gpus_per_node", name), "gpus_per_node", name)
    if not isinstance(per_node, int):
        raise ValueError(f"{_FILE}: {name}.gpus_per_node must be an integer")
    return HardwareSpec(
        name=name, tdp_w=tdp, gpus_per_node=per_node, fp8_tflops=fp8, host_link_gbps_per_dir=host,
        aliases=tuple(entry.get("aliases", ())), achieved=_achieved(entry, name), **v,
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, HardwareSpec]:
    text = resources.files("distsim.catalog").joinpath("data", _FILE).read_text(encoding="utf-8")
    gpus = json.loads(text)["gpus"]
    return {name: _parse(name, entry) for name, entry in gpus.items()}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@lru_cache(maxsize=1)
def _lookup() -> dict[str, str]:
    """Normalised name or alias (case, spaces, dashes ignored) -> catalog name."""
    table: dict[str, str] = {}
    for name, spec in _catalog().items():
        for alias in (name, *spec.aliases):
            table[_norm(alias)] = name
    return table


HARDWARE_NAMES: tuple[str, ...] = (
    "H100",
    "H200",
    "A100-80G",
    "L40S",
    "B200",
    "MI300X",
    "RTX4090",
    "RTXPRO6000",
)


def load_hardware(name: str, key: str = "cluster.hardware") -> HardwareSpec:
    """A catalog GPU by name or alias, case-insensitive (e.g. "H100", "h100-sxm-80g", "RTX PRO 6000")."""
    canonical = _lookup().get(_norm(str(name)))
    if canonical is None:
        raise ConfigError(key, f"unknown hardware {name!r}; known: {', '.join(HARDWARE_NAMES)}")
    return _catalog()[canonical]
