"""A pool's ``autoscale`` node checked into :class:`AutoscaleSettings` (resolve, then build).

The provisioning delay, when not given, is the time to load the weights one GPU holds at ``load_gbps``
plus ``startup_s`` for the rest of a vLLM start. Defaults and their sources: 1.1 GB/s is what vLLM's docs
measure for its default safetensors loader (Qwen3-30B-A3B on one H200, 57 s; docs.vllm.ai, "Loading Model
Weights with InstantTensor"); 30 s for process start, torch.compile from its cache and CUDA graph capture is
an assumption (vLLM's startup benchmark, vllm/benchmarks/startup.py, measures exactly this and users report
about a minute for a 12B model, weights included). Llama-3.1-8B on one GPU: 16.1 GB / 1.1 GB/s + 30 s = 45 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim.config import checks
from distsim.errors import ConfigError


@dataclass(frozen=True)
class AutoscaleSettings:
    kind: str
    cls: Any  # the registered Scaler class
    params: Any  # its checked Params
    min_replicas: int
    max_replicas: int
    interval_us: int
    cooldown_us: int
    provision_us: int
    key: str  # config path of the node, for messages


def resolve_autoscale(node: Any, key: str, count: int, count_key: str, weight_bytes_per_gpu: float) -> AutoscaleSettings | None:
    """The pool's autoscaling, or None when ``kind`` is null. ``count`` (at ``count_key``) is the initial
    replica count and must lie within [min, max]."""
    from distsim.autoscale.registry import SCALERS
    from distsim.autoscale.schema import COMMON, AutoscaleConfig

    if node is None:
        return None
    if node.get("kind") is None:  # what a pool that does not autoscale was given is not read
        checks.warn_unread(node, key, ("kind",), f"{key}.kind is null (no autoscaling), which does not use it", AutoscaleConfig())
        return None
    cls = SCALERS.get(node.kind, f"{key}.kind")
    reads = {name for name, _, _ in COMMON} | set(cls.Params.__dataclass_fields__)
    if node.provision_s is not None:  # a given provisioning delay replaces the one from load_gbps and startup_s
        reads -= {"load_gbps", "startup_s"}
    checks.warn_unread(node, key, reads, f"the autoscaler {node.kind!r} does not use it"
                       + (" (provision_s is given)" if node.provision_s is not None else ""), AutoscaleConfig())
    low = checks.integer(f"{key}.min", node.min, low=1)
    high = checks.integer(f"{key}.max", checks.required(f"{key}.max", node.max, "when autoscaling"), low=1)
    if high < low:
        raise ConfigError(f"{key}.max", f"must be >= min ({low}) (got {high})")
    if not low <= count <= high:
        raise ConfigError(count_key, f"the initial replicas must lie within {key}.min {low} and max {high} (got {count})")
    params = cls.Params.from_node(node)
    params.check(key)
    params.check_limits(key, low, high)
    interval_us = round(checks.positive(f"{key}.interval_s", node.interval_s) * 1e6)
    if interval_us < 1000:  # an evaluation every few microseconds would swamp the run
        raise ConfigError(f"{key}.interval_s", f"must be at least 0.001 s (got {node.interval_s!r})")
    cooldown_us = round(checks.non_negative(f"{key}.cooldown_s", node.cooldown_s) * 1e6)
    if node.provision_s is not None:
        provision_s = checks.non_negative(f"{key}.provision_s", node.provision_s)
    else:
        load = checks.positive(f"{key}.load_gbps", node.load_gbps) * 1e9
        provision_s = weight_bytes_per_gpu / load + checks.non_negative(f"{key}.startup_s", node.startup_s)
    return AutoscaleSettings(node.kind, cls, params, low, high, interval_us, cooldown_us, round(provision_s * 1e6), key)


def refuse_unsupported(cells: Any, sim: Any, pools: Any) -> None:
    """Autoscaling is not modelled with cells (each cell's share of a pool would scale on its own): refused,
    naming the key. (A measurement window is fine: the metrics package's window module bills the replicas within it.)"""
    scaled = next((pool for pool in pools if pool.autoscale is not None), None)
    if scaled is not None and cells.enabled:
        raise ConfigError(
            f"{scaled.autoscale.key}.kind",
            f"autoscaling is not supported with cells (cluster.cells.count = {cells.count}); set it to 1",
        )
