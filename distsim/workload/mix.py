"""Request types (``workload.mix``): shares of llm, vision, asr or any named type over one arrival stream.

Why a wrapper: the LLM requests of a mixed run must be exactly the requests the same seed gives without a
mix, thinned. So the configured source (synthetic or trace) generates every request as today, from its own
streams; this wrapper then draws each request's type from its own stream ("workload/types") and, for a
non-LLM type, the request's size from that type's streams ("workload/types/NAME/items", ".../size"). An LLM
request passes through untouched (the same object, the same draws); a non-LLM one becomes a
:class:`~distsim.request.TypedRequest` with the same id, arrival and tenant and no tokens. A trace row
that names its type (an optional ``type`` column, distsim.workload.traces) keeps it, with its own sizes.

A type carries ``items`` (batch items per request: images, audio windows), ``size`` (per item, in the
type's unit: image side in pixels, audio seconds) and ``slo_ms`` (its latency SLO, arrival to result).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig, OmegaConf

from distsim.errors import ConfigError
from distsim.events.rng import stream
from distsim.request import Request, new_typed_request
from distsim.typed_merge import merge_onto
from distsim.workload import checks
from distsim.workload.base import WorkloadSource
from distsim.workload.lengths import Buffered, Sampler
from distsim.workload.schema import DistConfig, RequestTypeConfig

LLM = "llm"
BLOCK = 4096

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


class MixedSource(WorkloadSource):
    """The configured source's requests, each given a type from the mix (see the module docstring). What it
    knows of itself is its base source's."""

    def __init__(self, base: WorkloadSource, mix: Mix, seed: int):
        self.base, self.mix, self.seed = base, mix, seed
        self.limit, self.duration_us = base.limit, base.duration_us

    @property
    def types_seen(self) -> frozenset[str] | set[str]:  # type: ignore[override]  # the base's, as it reads on
        return self.base.types_seen

    def describe(self) -> dict:
        return self.base.describe()

    def summary(self) -> dict | None:
        return self.base.summary()

    def _codes(self) -> Iterator[int]:
        """Each request's type as an index into ``mix.names``, drawn a block at a time."""
        rng = stream(self.seed, "workload/types")
        cum = np.cumsum(self.mix.shares)
        cum[-1] = 1.0
        while True:
            yield from np.searchsorted(cum, rng.random(BLOCK), side="right").tolist()

    def __iter__(self) -> Iterator[Request]:
        mix, seed = self.mix, self.seed
        draws = {
            name: (t, Buffered(t.items, stream(seed, f"workload/types/{name}/items")),
                   Buffered(t.size, stream(seed, f"workload/types/{name}/size")))
            for name, t in mix.types.items()
        }
        kinds = [draws.get(name) for name in mix.names]  # None: llm
        codes = self._codes()
        for req in self.base:
            kind = kinds[next(codes)]
            if kind is None or req.rtype != LLM:  # an LLM request, or a trace row that named its type
                yield req
                continue
            t, items, size = kind
            yield new_typed_request(req.request_id, req.arrival_us, t.name, int(items.next()), float(size.next()),
                                    t.slo_ms, req.tenant)
