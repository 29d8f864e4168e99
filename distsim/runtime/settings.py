"""Resolve the ``kind: runtime`` pools of ``cluster.pools`` into typed, checked settings (resolve, then build:
distsim.runtime.build only wires what this returns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim import validators
from distsim.catalog import load_hardware
from distsim.catalog.mig import slice_hardware
from distsim.catalog.runtime_models import RuntimeModelSpec, load_runtime_model
from distsim.errors import ConfigError
from distsim.runtime.curves.base import CurveContext, ServiceCurve
from distsim.runtime.curves.registry import CURVES
from distsim.runtime.curves.registry import READS as CURVE_READS

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.autoscale.settings import AutoscaleSettings
    from distsim.catalog import HardwareSpec
    from distsim.cluster.mig import MigSlices

POOL_KINDS = ("vllm", "runtime")
_VLLM_ONLY = ("engine", "latency")  # a runtime pool has no vLLM engine: these stay empty


@dataclass
class RuntimePoolSpec:
    """A pool of ``count`` identical runtime replicas, each on one GPU of ``hardware``, or on one MIG slice
    (``mig``; ``hardware`` is then the slice's). Not frozen only so the MIG packer (distsim.cluster.mig
    .place_pools) can record where its slices sit, as it does for vLLM pools."""

    name: str
    count: int
    serves: str  # the request type (workload.mix) it serves
    model: RuntimeModelSpec
    hardware: HardwareSpec
    max_batch_size: int
    window_us: int
    concurrency: int
    curve: ServiceCurve
    key: str
    gpus: int = 1
    mig: MigSlices | None = None  # None: whole GPUs
    autoscale: AutoscaleSettings | None = None  # None: a fixed pool of ``count``
    data_parallel_size: int = 1  # a replica is one unit (what the autoscaler reads of a vLLM pool's replicas)

    @property
    def built_count(self) -> int:
        """Replicas to build: an autoscaled pool builds its ``max`` (``count`` of them serve at first)."""
        return self.autoscale.max_replicas if self.autoscale is not None else self.count


def is_runtime(raw: DictConfig) -> bool:
    return raw.get("kind", "vllm") == "runtime"


def pool_kind(raw: DictConfig, key: str) -> str:
    return validators.choice(f"{key}.kind", raw.get("kind", "vllm"), POOL_KINDS)


def resolve_runtime_pool(cluster: DictConfig, raw: DictConfig, key: str) -> RuntimePoolSpec:
    """One runtime pool, every key checked; the catalog model must fit the GPU's memory."""
    for name in _VLLM_ONLY:
        if raw.get(name):
            raise ConfigError(f"{key}.{name}", "a runtime pool has no vLLM engine; set its runtime.* keys instead")
    if raw.get("role", "mixed") != "mixed":
        raise ConfigError(f"{key}.role", "a runtime pool has no P/D role (leave it mixed)")
    model = load_runtime_model(validators.required(f"{key}.model", raw.get("model"), "for a runtime pool"), f"{key}.model")
    hardware = load_hardware(raw.get("hardware") or cluster.hardware, f"{key}.hardware" if raw.get("hardware") else "cluster.hardware")
    rt = raw.runtime
    count = validators.integer(f"{key}.count", raw["count"], low=1)
    max_batch = validators.integer(f"{key}.runtime.max_batch_size", rt.max_batch_size, low=1)
    window_ms = validators.non_negative(f"{key}.runtime.batch_window_ms", rt.batch_window_ms)
    concurrency = validators.integer(f"{key}.runtime.concurrency", rt.concurrency, low=1)
    mig = _mig(raw, hardware, key)
    if mig is not None:  # each replica runs on a slice: the GPU scaled by the profile
        hardware = slice_hardware(hardware, mig.profile)
    if model.weight_bytes * concurrency > hardware.memory_bytes:
        where = f"a {mig.profile.name} slice of {hardware.name}" if mig is not None else hardware.name
        raise ConfigError(f"{key}.mig.profile" if mig is not None else f"{key}.runtime.concurrency",
                          f"{concurrency} copies of {model.name}'s weights ({model.weight_bytes / 1e9:.2f} GB each) do not "
                          f"fit {where}'s memory ({hardware.memory_bytes / 1e9:.1f} GB)")
    curve_key = f"{key}.runtime.curve"
    curve = CURVES.get(rt.curve.kind, f"{curve_key}.kind")(rt.curve, CurveContext(model, hardware, max_batch, curve_key))
    if rt.curve.kind in CURVE_READS:
        validators.warn_unread(rt.curve, curve_key, ("kind", *CURVE_READS[rt.curve.kind]), f"the {rt.curve.kind} curve does not use it")
    serves = rt.serves or model.modality
    if serves == "llm":
        raise ConfigError(f"{key}.runtime.serves", "LLM requests go to vLLM pools; name a non-LLM type")
    autoscale = _autoscale(raw, key, count, model.weight_bytes * concurrency, mig)
    return RuntimePoolSpec(raw["name"], count, str(serves), model, hardware, max_batch, int(round(window_ms * 1000)),
                           concurrency, curve, key, mig=mig, autoscale=autoscale)


def _autoscale(raw: DictConfig, key: str, count: int, weight_bytes: float, mig: MigSlices | None) -> AutoscaleSettings | None:
    """The pool's autoscaling (None: fixed). Provisioning, when not given, loads the weights the GPU holds
    (one copy per concurrency slot, as Triton loads one per model instance) plus ``startup_s``. A runtime has
    no KV cache, so a KV utilisation target is refused; MIG slices are not autoscaled, as for vLLM pools."""
    from distsim.autoscale.settings import resolve_autoscale

    settings = resolve_autoscale(raw.get("autoscale"), f"{key}.autoscale", count, f"{key}.count", weight_bytes)
    if settings is None:
        return None
    if getattr(settings.params, "signal", None) == "kv_utilization":
        raise ConfigError(f"{key}.autoscale.signal", "a runtime has no KV cache: track queue_depth, running or outstanding")
    if mig is not None:
        raise ConfigError(f"{key}.mig.profile", "autoscaling a pool of MIG slices is not modelled; give a fixed count")
    return settings


def _mig(raw: DictConfig, hardware: HardwareSpec, key: str) -> MigSlices | None:
    """The pool's MIG slices (None: whole GPUs), as a vLLM pool's (distsim.cluster.mig)."""
    from distsim.cluster.mig import resolve_mig

    return resolve_mig(raw.get("mig"), hardware, f"{key}.mig", 1, 1, key)


def resolve_runtime_pools(cluster: DictConfig) -> tuple[RuntimePoolSpec, ...]:
    """The runtime pools of ``cluster.pools`` (none without pools); checks every pool's kind, that names are
    unique over all pools, and that a vLLM pool remains (the LLM side of the cluster is always built)."""
    if not cluster.pools:
        return ()
    keys = [f"cluster.pools[{i}]" for i in range(len(cluster.pools))]
    kinds = [pool_kind(raw, key) for raw, key in zip(cluster.pools, keys)]
    for raw, key, kind in zip(cluster.pools, keys, kinds):
        if kind == "vllm" and raw.get("model") is not None:
            raise ConfigError(f"{key}.model", "a vLLM pool serves cluster.model; model names a runtime pool's model")
    if "runtime" not in kinds:
        return ()
    if "vllm" not in kinds:
        raise ConfigError("cluster.pools", "needs at least one vLLM pool beside the runtime pools (LLM requests, and "
                          "the cluster's routing, live there)")
    seen: set[str] = set()
    runtimes = []
    for raw, key, kind in zip(cluster.pools, keys, kinds):
        if raw["name"] in seen:
            raise ConfigError(f"{key}.name", f"pool name {raw['name']!r} used twice")
        seen.add(raw["name"])
        if kind == "runtime":
            runtimes.append(resolve_runtime_pool(cluster, raw, key))
    return tuple(runtimes)
