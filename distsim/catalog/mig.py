"""MIG slice profiles (``data/mig.json``) and the hardware a slice amounts to.

A GPU in MIG mode is cut into GPU instances, each with its own SMs, memory, memory controllers, L2 and
copy engines, so an engine on a slice runs as on a smaller GPU. That is how distsim models it: a slice
is a derived :class:`HardwareSpec` (the GPU scaled by the profile's fractions), and the roofline step
model, the KV capacity derivation and cost follow from it without special cases.

What the profile table gives (NVIDIA's MIG user guide) and what is assumed (SOURCES.md says more):
- compute: the profile's fraction of SMs, ``compute_slices / 7``; tensor peaks scale with it.
- memory: ``memory_slices / 8`` of the GPU's memory.
- memory bandwidth: proportional to the memory slices (each memory slice brings its own memory
  controllers and L2 banks); the guide gives no bandwidth figure.
- host link: the slice's share of the GPU's copy engines (the DMA engines that move data to and from the
  host) times the GPU's PCIe bandwidth (assumed: the guide gives copy engines, not bandwidth).
- GPU-to-GPU link: MIG slices have no peer-to-peer, so tensor parallelism over slices is refused
  (vLLM on MIG runs one engine per slice, TP 1).
- price: the slice's fraction of the GPU price is decided by the layout (distsim.cluster.mig), since a
  fleet pays for whole GPUs; the derived spec carries the compute share as a nominal price.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from distsim.catalog.hardware import HardwareSpec
from distsim.errors import ConfigError

_FILE = "mig.json"
_FIELDS = ("compute_slices", "memory_slices", "copy_engines", "max_instances")


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile of one GPU: the slices it takes of the GPU's budgets, and where it may start."""

    name: str
    gpu: str  # catalog GPU name
    compute_slices: int
    memory_slices: int  # also its placement size, in memory slices
    copy_engines: int
    max_instances: int  # of this profile on one GPU
    placements: tuple[int, ...]  # memory-slice indices a slice of this profile may start at
    gpu_compute_slices: int = 7
    gpu_memory_slices: int = 8
    gpu_copy_engines: int = 8

    @property
    def sm_fraction(self) -> float:
        return self.compute_slices / self.gpu_compute_slices

    @property
    def memory_fraction(self) -> float:
        return self.memory_slices / self.gpu_memory_slices

    @property
    def copy_engine_fraction(self) -> float:
        return self.copy_engines / self.gpu_copy_engines


def _int(entry: dict[str, Any], field: str, where: str) -> int:
    value = entry.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{_FILE}: {where}.{field} must be an integer >= 1 (got {value!r})")
    return value


def _parse_gpu(gpu: str, entry: dict[str, Any]) -> dict[str, MigProfile]:
    budgets = {f: _int(entry, f, gpu) for f in ("compute_slices", "memory_slices", "copy_engines")}
    profiles = {}
    for name, p in entry["profiles"].items():
        where = f"{gpu}.profiles.{name}"
        v = {f: _int(p, f, where) for f in _FIELDS}
        placements = tuple(p["placements"])
        if not placements or any(s < 0 or s + v["memory_slices"] > budgets["memory_slices"] for s in placements):
            raise ValueError(f"{_FILE}: {where}.placements must start slices inside the GPU's memory slices")
        if v["compute_slices"] > budgets["compute_slices"] or v["copy_engines"] > budgets["copy_engines"]:
            raise ValueError(f"{_FILE}: {where} takes more than the GPU has")
        profiles[name] = MigProfile(
            name, gpu, **v, placements=placements, gpu_compute_slices=budgets["compute_slices"],
            gpu_memory_slices=budgets["memory_slices"], gpu_copy_engines=budgets["copy_engines"],
        )
    return profiles


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict[str, MigProfile]]:
    text = resources.files("distsim.catalog").joinpath("data", _FILE).read_text(encoding="utf-8")
    return {gpu: _parse_gpu(gpu, entry) for gpu, entry in json.loads(text)["gpus"].items()}


def mig_profiles(gpu: str) -> dict[str, MigProfile]:
    """The MIG profiles of catalog GPU ``gpu`` by name ({} when it has none in the catalog)."""
    return dict(_catalog().get(gpu, {}))


def load_mig_profile(hardware: HardwareSpec, name: object, key: str) -> MigProfile:
    """Profile ``name`` (e.g. "3g.40gb", or "MIG 3g.40gb") of ``hardware``; a ConfigError naming ``key``
    when the GPU has no MIG or not that profile."""
    profiles = _catalog().get(hardware.name)
    if not profiles:
        with_mig = ", ".join(sorted(_catalog()))
        raise ConfigError(key, f"{hardware.name} has no MIG profiles (MIG slices are modelled on {with_mig})")
    text = str(name).strip()
    text = text[4:].strip() if text.lower().startswith("mig ") else text
    profile = profiles.get(text.lower())
    if profile is None:
        raise ConfigError(key, f"{hardware.name} offers no MIG profile {name!r}; known: {', '.join(profiles)}")
    return profile


def slice_hardware(hw: HardwareSpec, profile: MigProfile) -> HardwareSpec:
    """The GPU as one slice of ``profile`` sees it: compute and tensor peaks by the SM fraction, memory and
    its bandwidth by the memory fraction, the host link by the copy-engine fraction, one GPU per node (no
    peer-to-peer between slices); the name stays the GPU's (the pool records the profile)."""
    sm, mem = profile.sm_fraction, profile.memory_fraction
    return replace(
        hw,
        bf16_tflops=hw.bf16_tflops * sm,
        fp8_tflops=hw.fp8_tflops * sm if hw.fp8_tflops else None,
        hbm_bw_tbps=hw.hbm_bw_tbps * mem,
        memory_bytes=hw.memory_bytes * profile.memory_slices // profile.gpu_memory_slices,
        host_link_gbps_per_dir=hw.host_link_gbps_per_dir * profile.copy_engine_fraction,
        price_usd_per_gpu_hour=hw.price_usd_per_gpu_hour * sm,
        gpus_per_node=1,
    )
