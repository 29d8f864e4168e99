"""Request types (``workload.mix``): shares of llm, vision, asr or any named type over one arrival stream,
resolved from the config into a :class:`Mix` (distsim.workload.mixed draws them over the configured source).

A type carries ``items`` (batch items per request: images, audio windows), ``size`` (per item, in the
type's unit: image side in pixels, audio seconds) and ``slo_ms`` (its latency SLO, arrival to result).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from distsim.errors import ConfigError
from distsim.typed_merge import merge_onto
from distsim.workload import checks
from distsim.workload.lengths import Sampler
from distsim.workload.schema import DistConfig, RequestTypeConfig

LLM = "llm"

# The built-in types (a workload's ``types.NAME`` keys override theirs). vision: one to four 224-pixel images
# (ImageNet's input), 200 ms SLO; asr: one clip of 2-30 s of audio (a lognormal around 8 s, clamped to
# Whisper's 30 s window), 1 s SLO. SLOs a platform would set for interactive use. In code, not in the
# schema's defaults: config nodes cost every run, used or not.
BUILTIN_TYPES = {
    "vision": RequestTypeConfig(items=DistConfig(dist="uniform", low=1, high=4), size=DistConfig(dist="fixed", value=224.0),
                                slo_ms=200.0),
    "asr": RequestTypeConfig(items=DistConfig(dist="fixed", value=1),
                             size=DistConfig(dist="lognormal", mu=2.08, sigma=0.6, min=2.0, max=30.0), slo_ms=1000.0),
}


@dataclass(frozen=True)
class RequestType:
    """One non-LLM type, resolved: its samplers and SLO."""

    name: str
    items: Sampler
    size: Sampler
    slo_ms: float | None


@dataclass(frozen=True)
class Mix:
    """The types in the order the config lists them, their shares (summing to 1), and each non-LLM type."""

    names: tuple[str, ...]
    shares: tuple[float, ...]
    types: dict[str, RequestType]

    @property
    def served(self) -> tuple[str, ...]:
        """The types some request may have (share > 0)."""
        return tuple(n for n, s in zip(self.names, self.shares) if s > 0)


def _request_type(name: str, raw: Mapping[str, object] | None) -> RequestType:
    key = f"workload.types.{name}"
    cfg = merge_onto(OmegaConf.structured(BUILTIN_TYPES.get(name, RequestTypeConfig())), raw, key)
    slo = None if cfg.slo_ms is None else checks.positive(f"{key}.slo_ms", cfg.slo_ms)
    base = BUILTIN_TYPES.get(name, RequestTypeConfig())
    items = Sampler(cfg["items"], f"{key}.items", default=base.items)
    return RequestType(name, items, Sampler(cfg.size, f"{key}.size", integer=False, default=base.size), slo)


def type_slos(cfg: DictConfig) -> dict[str, float | None]:
    """Each configured type's latency SLO (a trace's typed rows take their type's; an unknown type: none)."""
    out = {name: t.slo_ms for name, t in BUILTIN_TYPES.items()}
    for name, raw in (cfg.get("types") or {}).items():
        slo = raw.get("slo_ms", out.get(str(name))) if hasattr(raw, "get") else None
        out[str(name)] = None if slo is None else checks.positive(f"workload.types.{name}.slo_ms", slo)
    return out


def resolve_mix(cfg: DictConfig) -> Mix | None:
    """The workload's mix, checked; None when every request is an LLM request (no mix, or only llm)."""
    raw = cfg.get("mix")
    if raw is None or (hasattr(raw, "keys") and len(raw) == 0):
        return None
    if not hasattr(raw, "items"):
        raise ConfigError("workload.mix", f"must be a mapping of type name to share, e.g. {{llm: 0.7, vision: 0.3}} (got {raw!r})")
    names = tuple(str(n) for n in raw.keys())
    shares = tuple(checks.non_negative(f"workload.mix.{n}", raw[n]) for n in names)
    total = sum(shares)
    if not total > 0:
        raise ConfigError("workload.mix", "the shares sum to 0: give at least one type a positive share")
    if all(n == LLM or s == 0 for n, s in zip(names, shares)):
        return None
    given = cfg.get("types") or {}
    known = set(given) | set(BUILTIN_TYPES)
    types = {}
    for name, share in zip(names, shares):
        if name == LLM or share == 0:
            continue
        if name not in known:
            raise ConfigError(f"workload.mix.{name}", f"no workload.types.{name} says what it carries; known types: "
                              f"{', '.join([LLM, *sorted(known)])}")
        types[name] = _request_type(name, given.get(name))
    if cfg.sessions.enabled:
        raise ConfigError("workload.mix", "sessions are LLM conversations: a mix with non-LLM types needs sessions off")
    return Mix(names, tuple(s / total for s in shares), types)
