"""Pools on MIG slices: which profile, whether the model fits a slice, and how slices pack onto GPUs.

A pool with ``mig.profile`` set (``cluster.pools[i].mig.profile``, or ``cluster.mig.profile`` for the
single pool) runs ``count`` instances, one per slice, each on the GPU scaled to the slice
(:func:`distsim.catalog.mig.slice_hardware`). Resolution refuses, naming the key, what vLLM on MIG cannot
do: a profile the GPU does not offer, tensor or data parallelism over slices (a slice has no peer-to-peer;
vLLM runs one TP-1 engine per slice), and a model whose weights plus one max_model_len sequence of KV do
not fit the slice's memory (vLLM refuses to start there). Autoscaling and cells are not modelled with MIG
and are refused.

Packing (:func:`pack`): every sliced pool of one GPU type shares that type's GPUs. Slices are placed
largest first, each at the first GPU and the first start the profile's placement table allows whose
memory slices are all free, and at most ``max_instances`` of a profile per GPU; so no GPU ever holds more
than its compute and memory slices (tests/test_mig.py checks every layout it makes). A fleet pays for
whole GPUs: each GPU's price is split among the slices on it in proportion to their compute slices
(:attr:`MigSlices.share`; seven 1g slices cost one GPU, and a GPU left half empty is billed to the slices
that hold it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from distsim.catalog.mig import MigProfile, load_mig_profile, mig_profiles, slice_hardware
from distsim.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.catalog import HardwareSpec, ModelSpec

GIB = 1024**3


@dataclass(frozen=True)
class MigSlices:
    """A pool's slices: the profile, and where the packer put each (filled in by :func:`place_pools`)."""

    profile: MigProfile
    gpu_price_usd_per_hour: float  # the whole GPU's
    gpu: tuple[int, ...] = ()  # each slice's GPU, numbered over the fleet's sliced GPUs
    start: tuple[int, ...] = ()  # each slice's first memory slice on its GPU
    share: tuple[float, ...] = ()  # the share of its GPU's price billed to each slice

    @property
    def gpus(self) -> float:
        """The GPUs the pool pays for: its slices' shares summed."""
        return float(sum(self.share))


class SlicedPool(Protocol):
    """A pool as the packer and the billing read it, a vLLM pool (distsim.cluster.pools.PoolSpec) or a
    batching runtime's (distsim.runtime.settings.RuntimePoolSpec): its name, its instances, the hardware
    each runs on, and its slices (None: whole GPUs), which :func:`place_pools` replaces with the placed ones."""

    mig: MigSlices | None

    @property
    def name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def hardware(self) -> HardwareSpec: ...


@dataclass
class _Gpu:
    """One GPU being filled: its free memory slices, compute slices used, slices of each profile."""

    hardware: str
    free: list[bool]
    compute: int = 0
    per_profile: dict[str, int] = field(default_factory=dict)

    def start_for(self, p: MigProfile) -> int | None:
        if self.per_profile.get(p.name, 0) >= p.max_instances or self.compute + p.compute_slices > p.gpu_compute_slices:
            return None
        for s in p.placements:
            if all(self.free[s : s + p.memory_slices]):
                return s
        return None

    def put(self, p: MigProfile, s: int) -> None:
        self.free[s : s + p.memory_slices] = [False] * p.memory_slices
        self.compute += p.compute_slices
        self.per_profile[p.name] = self.per_profile.get(p.name, 0) + 1


def pack(profiles: list[MigProfile]) -> list[tuple[int, int]]:
    """(GPU, start memory slice) for each slice in ``profiles`` (in their order): largest first, first fit.
    GPUs are numbered in the order they are opened; each GPU holds one GPU type."""
    order = sorted(range(len(profiles)), key=lambda i: (-profiles[i].memory_slices, -profiles[i].compute_slices))
    gpus: list[_Gpu] = []
    first: dict[tuple[str, str], int] = {}  # (gpu type, profile) -> the first GPU that may still take one
    where: list[tuple[int, int]] = [(-1, -1)] * len(profiles)
    for i in order:
        p = profiles[i]
        g = first.get((p.gpu, p.name), 0)
        while g < len(gpus) and (gpus[g].hardware != p.gpu or gpus[g].start_for(p) is None):
            g += 1
        if g == len(gpus):
            gpus.append(_Gpu(p.gpu, [True] * p.gpu_memory_slices))
        s = gpus[g].start_for(p)
        gpus[g].put(p, s)
        first[(p.gpu, p.name)] = g
        where[i] = (g, s)
    return where


def place_pools(pools: Sequence[SlicedPool]) -> None:
    """Pack every sliced pool's slices onto GPUs and record each slice's GPU, start and billed share."""
    sliced = [p for p in pools if p.mig is not None]
    if not sliced:
        return
    profiles = [p.mig.profile for p in sliced for _ in range(p.count)]
    where = pack(profiles)
    compute: dict[int, int] = {}
    for prof, (g, _) in zip(profiles, where):
        compute[g] = compute.get(g, 0) + prof.compute_slices
    i = 0
    for pool in sliced:
        mine = where[i : i + pool.count]
        share = tuple(pool.mig.profile.compute_slices / compute[g] for g, _ in mine)
        pool.mig = replace(pool.mig, gpu=tuple(g for g, _ in mine), start=tuple(s for _, s in mine), share=share)
        i += pool.count


def resolve_mig(raw: DictConfig | None, hardware: HardwareSpec, key: str, tp: int, dp: int, engine_key: str) -> MigSlices | None:
    """The pool's MIG profile (None: whole GPUs), after refusing what cannot run on slices."""
    profile_name = None if raw is None else raw.get("profile")
    if profile_name is None:
        return None
    profile = load_mig_profile(hardware, profile_name, f"{key}.profile")
    if tp != 1:
        raise ConfigError(
            f"{engine_key}.tensor_parallel_size",
            f"must be 1 on MIG slices (got {tp}): slices have no peer-to-peer link, and vLLM on MIG runs one "
            f"engine per slice; choose a larger profile than {profile.name} instead",
        )
    if dp != 1:
        raise ConfigError(f"{engine_key}.data_parallel_size", f"must be 1 on MIG slices (got {dp}): one engine per slice")
    return MigSlices(profile, hardware.price_usd_per_gpu_hour)


def _fitting(model: ModelSpec, hw: HardwareSpec, engine: DictConfig, need_tokens: int, engine_key: str) -> bool:
    """Whether the derived KV cache on ``hw`` holds ``need_tokens`` tokens beside the weights."""
    from distsim.catalog.capacity import derive_total_kv_blocks

    try:
        blocks = derive_total_kv_blocks(model, hw, engine, key_prefix=engine_key)
    except ConfigError as err:
        if not err.key.endswith("tensor_parallel_size"):  # its one "does not fit" refusal; others are real
            raise
        return False
    return blocks * engine.block_size >= need_tokens


def check_fits(
    model: ModelSpec, gpu: HardwareSpec, mig: MigSlices, engine: DictConfig, max_model_len: int | None, key: str,
    engine_key: str,
) -> HardwareSpec:
    """The slice's hardware, once the model's weights plus one max_model_len sequence of KV fit its memory
    (vLLM's start-up check); else a ConfigError naming ``key`` with what it needs and what would fit."""
    hw = slice_hardware(gpu, mig.profile)
    need = max_model_len or engine.block_size
    if _fitting(model, hw, engine, need, engine_key):
        return hw
    fits = [p.name for p in mig_profiles(gpu.name).values() if _fitting(model, slice_hardware(gpu, p), engine, need, engine_key)]
    weights = model.weight_bytes_per_gpu(1, 1) / GIB
    kv = need * model.kv_bytes_per_token_per_gpu(1) / GIB
    usable = hw.memory_bytes * (engine.gpu_memory_utilization - engine.activation_reserve_fraction) / GIB
    hint = f"profiles that fit: {', '.join(fits)}" if fits else f"no {gpu.name} profile fits it"
    raise ConfigError(
        key,
        f"{model.name} does not fit a {gpu.name} MIG {mig.profile.name} slice: its weights take {weights:.1f} GiB and "
        f"one {need}-token sequence (max_model_len) {kv:.2f} GiB of KV, but {usable:.1f} GiB of the slice's "
        f"{hw.memory_bytes / GIB:.1f} GiB are usable (gpu_memory_utilization minus the activation reserve); {hint}, "
        f"or lower {engine_key}.max_model_len",
    )


def refuse_with_cells(pools: Sequence[SlicedPool], cells: DictConfig | None) -> None:
    """Cells split every pool's instances among cells, which would split GPUs' slices: not modelled."""
    if any(p.mig is not None for p in pools) and cells is not None and cells.get("count", 1) != 1:
        raise ConfigError("cluster.cells.count", "cells over MIG slices are not modelled; use 1 cell or whole GPUs")


def instance_slices(pool_of: Sequence[SlicedPool]) -> list[tuple[MigSlices, int] | None]:
    """Each instance's (pool's slices, its slice number), None on a whole GPU. A pool's instances are
    consecutive and one per slice (resolution refuses DP, autoscaling and cells with MIG)."""
    out: list[tuple[MigSlices, int] | None] = []
    seen: dict[str, int] = {}
    for pool in pool_of:
        if pool.mig is None:
            out.append(None)
            continue
        k = seen.get(pool.name, 0)
        seen[pool.name] = k + 1
        out.append((pool.mig, k))
    return out


def slice_columns(pool_of: Sequence[SlicedPool]) -> dict[str, list]:
    """instances.parquet's MIG columns (only when some pool is sliced): the price per device (a slice's share
    of its GPU's), the profile ("" on a whole GPU), the sliced GPU it sits on (-1: a whole GPU of its own),
    and the share of a GPU billed to it (1.0 whole)."""
    slices = instance_slices(pool_of)
    return {
        "price_usd_per_gpu_hour": price_per_hour(pool_of),
        "mig_profile": [s[0].profile.name if s else "" for s in slices],
        "mig_gpu": [s[0].gpu[s[1]] if s else -1 for s in slices],
        "gpu_fraction": [s[0].share[s[1]] if s else 1.0 for s in slices],
    }


def price_per_hour(pool_of: Sequence[SlicedPool]) -> list[float]:
    """Each instance's hourly price per device: the GPU's price, times the billed share on a slice."""
    slices = instance_slices(pool_of)
    return [s[0].gpu_price_usd_per_hour * s[0].share[s[1]] if s else p.hardware.price_usd_per_gpu_hour for p, s in zip(pool_of, slices)]
