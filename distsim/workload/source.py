"""The workload entry point: ``build_workload`` and the source objects the simulator iterates.

Building a source validates the whole workload config (and reads a trace through once), so a user's
mistake stops the run before anything is simulated. Iterating a source yields :class:`Request` objects
in non-decreasing ``arrival_us`` with ``request_id`` 0, 1, 2, ... in that order. Every iteration starts
afresh from the seed, so iterating twice gives the same stream; nothing but the workload config, the
seed and the block size goes into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import is_dataclass

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from distsim.config.workload import WorkloadConfig
from distsim.errors import ConfigError
from distsim.request import Request
from distsim.workload import checks
from distsim.workload.kinds import KINDS


class WorkloadSource:
    """An iterable of requests; ``describe`` reports what was generated or read (may be ``{}``)."""

    def __iter__(self) -> Iterator[Request]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict:
        return {}

    def summary(self) -> dict | None:
        """What summary.json reports under ``workload`` (None: nothing, so synthetic runs add no key)."""
        return None


SourceBuilder = Callable[[DictConfig, int, int], WorkloadSource]  # (cfg, seed, block_size)


def as_config(cfg) -> DictConfig:
    """The workload node merged onto the schema, so every key exists and has the right type."""
    try:
        base = OmegaConf.structured(WorkloadConfig)
        if cfg is None:
            return base
        if is_dataclass(cfg) or isinstance(cfg, dict):
            cfg = OmegaConf.structured(cfg) if is_dataclass(cfg) else OmegaConf.create(cfg)
        return OmegaConf.merge(base, cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"workload.{key}", str(err).splitlines()[0]) from None


def build_workload(workload_cfg, *, seed: int, block_size: int = 16) -> WorkloadSource:
    """The request source for the composed ``workload`` config node (validated here, before any request)."""
    cfg = as_config(workload_cfg)
    seed = checks.integer("seed", seed, low=0)
    block_size = checks.integer("cluster.engine.block_size", block_size, low=1)
    source = KINDS.get(cfg.kind)(cfg, seed, block_size)
    if cfg.get("mix") is None:  # every request an LLM request (the mix module is not even imported)
        return source
    from distsim.workload.mix import MixedSource, resolve_mix

    mix = resolve_mix(cfg)  # request types (workload.mix); None: only LLM requests after all
    return source if mix is None else MixedSource(source, mix, seed)


def limits(cfg, *, need_one: bool) -> tuple[int | None, int | None]:
    """``(num_requests, duration in us)`` from the config; ``need_one``: at least one must be set."""
    n = None if cfg.num_requests is None else checks.integer("workload.num_requests", cfg.num_requests, low=0)
    dur = None
    if cfg.duration_s is not None:
        dur = round(checks.non_negative("workload.duration_s", cfg.duration_s) * 1_000_000)
    if need_one and n is None and dur is None:
        raise ConfigError(
            "workload.num_requests", "set workload.num_requests or workload.duration_s (both null)"
        )
    return n, dur
