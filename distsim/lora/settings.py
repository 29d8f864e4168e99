"""``cluster.engine.lora`` checked into :class:`LoraSettings` (a bad value: one line naming the key), and the
load times and step cost it implies for one pool's model and GPUs.

Figures and where they come from: vLLM's defaults (``max_loras`` 1, ``max_lora_rank`` 16, ``max_cpu_loras`` =
``max_loras``; vllm/config/lora.py) and its rules (``max_cpu_loras`` >= ``max_loras``; an adapter whose rank
exceeds ``max_lora_rank`` is refused); the host link's bandwidth from the hardware catalog
(``host_link_gbps_per_dir``, shared/data/hardware.json); the disk's from the config (no default: it is the
deployment's storage). The step cost is :mod:`distsim.lora.step_cost`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.lora.sizes import adapter_bytes, adapter_bytes_per_gpu, slot_bytes_per_gpu

if TYPE_CHECKING:
    from distsim.catalog import HardwareSpec, ModelSpec

MAX_RANK = 512  # vLLM's largest supported max_lora_rank (vllm/config/lora.py: 1 to 512)


@dataclass(frozen=True)
class LoraSettings:
    """One pool's LoRA engine: its slots, its CPU cache, and what loads and steps cost on its GPUs."""

    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int
    disk_read_bps: float  # bytes per second
    model: ModelSpec
    tp: int
    host_link_bps: float  # bytes per second, per GPU and direction
    hbm_bps: float  # the GPU's memory bandwidth (datasheet), bytes per second
    peak_flops: float  # the GPU's dense bf16 tensor peak (datasheet)

    @property
    def slot_bytes_per_gpu(self) -> float:
        return slot_bytes_per_gpu(self.model, self.tp, self.max_loras, self.max_lora_rank)

    def disk_us(self, rank: int) -> int:
        """Reading a whole adapter of ``rank`` from disk into host memory."""
        return round(adapter_bytes(self.model, rank) / self.disk_read_bps * 1e6)

    def host_us(self, rank: int) -> int:
        """Copying each GPU's share of an adapter of ``rank`` from host memory into its slot (in parallel)."""
        return round(adapter_bytes_per_gpu(self.model, self.tp, rank) / self.host_link_bps * 1e6)


def _integer(node: Any, name: str, key: str, low: int, high: int | None = None) -> int:
    value = node.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{key}.{name}", f"must be an integer {bound} (got {value!r})")
    return value


def resolve_lora(node: Any, key: str, model: ModelSpec, hardware: HardwareSpec, tp: int) -> LoraSettings | None:
    """The settings of a ``cluster.engine.lora`` node (None while ``max_loras`` is null: LoRA off)."""
    if node is None or node.get("max_loras") is None:
        return None
    max_loras = _integer(node, "max_loras", key, 1)
    rank = _integer(node, "max_lora_rank", key, 1, MAX_RANK)
    cpu = node.get("max_cpu_loras")
    cpu = max_loras if cpu is None else _integer(node, "max_cpu_loras", key, max_loras)
    disk = node.get("disk_read_gbps")
    if disk is None:
        raise ConfigError(f"{key}.disk_read_gbps", "LoRA is on: give the read bandwidth (GB/s) of the storage adapters load from")
    if isinstance(disk, bool) or not isinstance(disk, (int, float)) or not disk > 0 or disk == float("inf"):
        raise ConfigError(f"{key}.disk_read_gbps", f"must be a bandwidth > 0 in GB/s (got {disk!r})")
    if model.num_experts or model.is_mla:
        raise ConfigError(f"{key}.max_loras", f"LoRA is modelled on dense models with standard attention ({model.name} is not)")
    return LoraSettings(max_loras, rank, cpu, float(disk) * 1e9, model, tp, hardware.host_link_gbps_per_dir * 1e9,
                        hardware.hbm_bw_tbps * 1e12, hardware.peak_flops)
