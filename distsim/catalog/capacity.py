"""How many KV-cache blocks fit on one instance, derived the way vLLM sizes its cache.

vLLM takes ``gpu_memory_utilization`` of the device memory, subtracts the weights and the peak
activation memory it profiles, and fills the rest with KV blocks. We cannot profile, so activations
(plus CUDA graphs and allocator slack) are a fixed ``activation_reserve_fraction`` of device memory.
Checked against a real vLLM 0.19 run (Llama-3.1-8B on an RTX 4090, tests/test_catalog.py): the
derivation lands within 1% of the measured ``num_gpu_blocks``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from distsim.catalog.hardware import HardwareSpec
from distsim.catalog.models import ModelSpec
from distsim.errors import ConfigError

# ``engine`` below: an engine node, cluster.engine merged with a pool's (distsim.config.schema.EngineConfig)
if TYPE_CHECKING:
    from omegaconf import DictConfig

GIB = 1024**3


def _number(engine: DictConfig, name: str, key: str, low: float, high: float, low_open: bool) -> float:
    value = getattr(engine, name)
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value > high or value < low or (low_open and value == low):
        bound = "(" if low_open else "["
        raise ConfigError(f"{key}.{name}", f"must be in {bound}{low}, {high}] (got {value!r})")
    return float(value)


def _blocks(model: ModelSpec, hw: HardwareSpec, engine: DictConfig, tp: int, util: float, reserve: float) -> int:
    """KV blocks one GPU of an engine holds at these settings (0 when nothing is left for them)."""
    expert_dp = engine.data_parallel_size if getattr(engine, "enable_expert_parallel", False) else 1
    available = hw.memory_bytes * util - hw.memory_bytes * reserve
    windows = getattr(engine, "max_num_seqs", 0) * model.kv_window_bytes_per_seq_per_gpu(tp)
    usable = available - model.weight_bytes_per_gpu(tp, expert_dp) - windows
    per_block = engine.block_size * model.kv_bytes_per_token_per_gpu(tp)
    return math.floor(usable / per_block) if usable > 0 else 0


def resident_bytes_per_gpu(model: ModelSpec, hw: HardwareSpec, engine: DictConfig, tp: int,
                           weights: float | None = None) -> float:
    """What one GPU of an engine holds besides its KV blocks, as :func:`_blocks` counts it: the weights, the
    activation reserve and a full sliding window per sequence (instances.parquet's memory utilisation).
    ``weights`` overrides the whole model's weights per GPU, for a pipeline stage that holds only its layers."""
    if weights is None:
        expert_dp = engine.data_parallel_size if getattr(engine, "enable_expert_parallel", False) else 1
        weights = model.weight_bytes_per_gpu(tp, expert_dp)
    windows = getattr(engine, "max_num_seqs", 0) * model.kv_window_bytes_per_seq_per_gpu(tp)
    reserve = hw.memory_bytes * float(engine.activation_reserve_fraction)
    return weights + windows + reserve


def memory_remedies(model: ModelSpec, hw: HardwareSpec, engine: DictConfig, need_tokens: int, gpus_per_node: int | None = None) -> list[str]:
    """What would give ``need_tokens`` tokens of KV cache, each only if it would: a higher
    gpu_memory_utilization (up to its maximum, 1), the smallest larger tensor_parallel_size the model allows
    whose tp x dp GPUs still fit one node, or a catalog GPU with more memory at this TP."""
    from distsim.catalog.hardware import HARDWARE_NAMES, load_hardware

    tp, util = engine.tensor_parallel_size, float(engine.gpu_memory_utilization)
    reserve, block = float(engine.activation_reserve_fraction), engine.block_size
    fits = lambda h, t, u: _blocks(model, h, engine, t, u, reserve) * block >= need_tokens  # noqa: E731
    out = []
    if util < 1.0 and fits(hw, tp, 1.0):
        low, high = util, 1.0  # the smallest utilisation that fits, to two decimals (rounded up)
        for _ in range(30):
            mid = (low + high) / 2
            low, high = (low, mid) if fits(hw, tp, mid) else (mid, high)
        out.append(f"raise gpu_memory_utilization to {math.ceil(high * 100) / 100:g}")
    per_node = gpus_per_node or hw.gpus_per_node
    for larger in range(tp + 1, per_node // engine.data_parallel_size + 1):
        try:
            model.check_tensor_parallel(larger)
        except ConfigError:
            continue
        if fits(hw, larger, util):
            out.append(f"raise tensor_parallel_size to {larger}")
            break
    bigger = [h for h in map(load_hardware, HARDWARE_NAMES) if h.memory_bytes > hw.memory_bytes and fits(h, tp, util)]
    if bigger:
        out.append(f"choose a GPU with more memory ({', '.join(h.name for h in bigger)})")
    return out


def advice(remedies: list[str], last: str = "") -> str:
    """The remedies as one clause: "a, b or c"; ``last`` joins them at the end when given."""
    items = [*remedies, last] if last else remedies
    if not items:
        return "no setting of this engine and GPU makes it fit"
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def derive_total_kv_blocks(
    model: ModelSpec,
    hw: HardwareSpec,
    engine: DictConfig,
    key_prefix: str = "cluster.engine",
    gpus_per_node: int | None = None,
    need_tokens: int | None = None,
) -> int:
    """KV blocks per instance: floor(usable bytes per GPU / (block_size x KV bytes per token per GPU)).

    usable = memory x gpu_memory_utilization - weights per GPU - activation_reserve_fraction x memory
    (- a full sliding window per sequence for models with window layers, at max_num_seqs sequences).
    When nothing is left, the ConfigError advises only what would make room (:func:`memory_remedies`) for
    ``need_tokens`` (one max_model_len sequence, which vLLM needs to start; None: one block).
    """
    tp = engine.tensor_parallel_size
    model.check_tensor_parallel(tp, f"{key_prefix}.tensor_parallel_size")
    util = _number(engine, "gpu_memory_utilization", key_prefix, 0.0, 1.0, low_open=True)
    reserve = _number(engine, "activation_reserve_fraction", key_prefix, 0.0, 1.0, low_open=False)
    block = engine.block_size
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ConfigError(f"{key_prefix}.block_size", f"must be an integer >= 1 (got {block!r})")

    blocks = _blocks(model, hw, engine, tp, util, reserve)
    if blocks <= 0:
        expert_dp = engine.data_parallel_size if getattr(engine, "enable_expert_parallel", False) else 1
        weights = model.weight_bytes_per_gpu(tp, expert_dp)
        available = hw.memory_bytes * (util - reserve)
        raise ConfigError(
            f"{key_prefix}.tensor_parallel_size",
            f"model {model.name} does not fit on {hw.name} at tensor_parallel_size={tp}: its weights need "
            f"{weights / GIB:.1f} GiB per GPU but only {available / GIB:.1f} GiB of the "
            f"{hw.memory_bytes / GIB:.1f} GiB are available (gpu_memory_utilization={util:g} minus the "
            f"activation reserve {reserve:g}), leaving no room for the KV cache; "
            f"{advice(memory_remedies(model, hw, engine, max(need_tokens or block, block), gpus_per_node))}",
        )
    return blocks
