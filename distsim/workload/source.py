"""The workload entry point: ``build_workload`` and the source objects the simulator iterates.

Building a source validates the whole workload config (and reads a trace through once), so a user's
mistake stops the run before anything is simulated. Iterating a source yields :class:`Request` objects
in non-decreasing ``arrival_us`` with ``request_id`` 0, 1, 2, ... in that order. Every iteration starts
afresh from the seed, so iterating twice gives the same stream; nothing but the workload config, the
seed and the block size goes into it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import is_dataclass

from omegaconf import DictConfig, OmegaConf

from distsim.errors import ConfigError, warn_config
from distsim.provenance import user_set_within
from distsim.typed_merge import merge_onto
from distsim.workload import checks
from distsim.workload.base import WorkloadSource
from distsim.workload.kinds import KINDS
from distsim.workload.schema import WorkloadConfig

SourceBuilder = Callable[[DictConfig, int, int], WorkloadSource]  # (cfg, seed, block_size)


def as_config(cfg) -> DictConfig:
    """The workload node merged onto the schema, so every key exists and has the right type (a node Hydra
    composed onto the schema is that already: merging it again cost half of resolving the config)."""
    if isinstance(cfg, DictConfig) and OmegaConf.get_type(cfg) is WorkloadConfig:
        return cfg
    base = OmegaConf.structured(WorkloadConfig)
    if cfg is None:
        return base
    if is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return merge_onto(base, cfg, "workload")


def build_workload(workload_cfg, *, seed: int, block_size: int = 16) -> WorkloadSource:
    """The request source for the composed ``workload`` config node (validated here, before any request). Its
    streams derive from ``workload.seed`` when set, else from ``seed`` (the master seed, as every other stream)."""
    cfg = as_config(workload_cfg)
    seed = checks.integer("seed", seed, low=0)
    if cfg.seed is not None:  # workload.seed: the requests held fixed while the simulation's seed varies
        seed = checks.integer("workload.seed", cfg.seed, low=0)
    block_size = checks.integer("cluster.engine.block_size", block_size, low=1)
    source = KINDS.get(cfg.kind)(cfg, seed, block_size)
    if cfg.lora.adapters:  # each request names a LoRA adapter (distsim.workload.adapters)
        from distsim.lora.catalog import resolve_catalog
        from distsim.workload.adapters import AdapterSource

        catalog = resolve_catalog(cfg.lora)
        source = AdapterSource(source, catalog, seed) if catalog is not None else source
    if cfg.clients.count is not None or cfg.clients.stages:  # closed-loop clients send the source's requests
        from distsim.workload.clients import closed_loop

        return closed_loop(source, cfg, seed)
    if cfg.sessions.enabled and cfg.sessions.closed_loop:  # each turn waits for the previous reply
        from distsim.workload.agentic import closed_loop_sessions

        return closed_loop_sessions(source, cfg)
    if cfg.get("mix") is None:  # every request an LLM request (the mix module is not even imported)
        return source
    from distsim.workload.mix import resolve_mix
    from distsim.workload.mixed import MixedSource

    mix = resolve_mix(cfg)  # request types (workload.mix); None: only LLM requests after all
    return source if mix is None else MixedSource(source, mix, seed)


# what only one kind reads: a trace's file and its replay options; the synthetic generator's sections
TRACE_ONLY = ("format", "path", "time_scale", "target_rate_rps", "start_s", "end_s", "max_rows", "jitter_s")
SYNTHETIC_ONLY = ("arrival", "input_tokens", "output_tokens", "sessions")


def warn_other_kinds_keys(cfg) -> None:
    """Warn about keys only the other ``workload.kind`` reads, set although this kind ignores them: a trace
    option under ``synthetic`` each, the synthetic sections a trace ignores in one line (the schema's
    defaults and what the user did not set aside, so a shipped trace workload, or ``workload.kind=trace``
    on the default workload, stays silent)."""
    schema = WorkloadConfig()
    if cfg.kind == "synthetic":
        reads = [name for name in cfg if name not in TRACE_ONLY]
        checks.warn_unread(cfg, "workload", reads, "workload.kind 'synthetic' does not use it", schema)
        return
    replayed = ("sessions",) if cfg.sessions.enabled and cfg.sessions.closed_loop else ()  # a session trace, closed loop
    unread = [f"workload.{name}" for name in SYNTHETIC_ONLY if name not in replayed
              and checks.is_set(cfg[name], getattr(schema, name)) and user_set_within(f"workload.{name}")]
    if unread:
        verb = "are" if len(unread) > 1 else "is"
        warn_config(
            "workload.kind",
            f"is {cfg.kind!r}, which replays the file's arrival times and lengths: {', '.join(unread)} {verb} set but not used",
        )


def limits(cfg, *, need_one: bool) -> tuple[int | None, int | None]:
    """``(num_requests, duration in us)`` from the config; ``need_one``: at least one must be set (or the
    closed-loop clients' stages, which end the run)."""
    n = None if cfg.num_requests is None else checks.integer("workload.num_requests", cfg.num_requests, low=0)
    dur = None
    if cfg.duration_s is not None:
        dur = round(checks.non_negative("workload.duration_s", cfg.duration_s) * 1_000_000)
    if need_one and n is None and dur is None and not cfg.clients.stages:  # client stages end by themselves
        raise ConfigError(
            "workload.num_requests", "set workload.num_requests or workload.duration_s (both null)"
        )
    return n, dur
