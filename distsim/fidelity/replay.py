"""The one replay path: simulate a measured run on the engine it was measured with.

A run is either a :class:`~distsim.fidelity.run.MeasuredRun` (per-request times: a vLLM bench folder or a
CSV run; its requests are replayed as they arrived) or a :class:`~distsim.fidelity.suite.data.SuiteRun`
(per-stage aggregates: a run of a folder laid out like ``../shared/data/h100_vllm_runs``; its trace goes
through distsim's ``csv`` trace reader, ``prefix_group`` mapped onto shared leading block keys). Both
replay the same way: the embedded defaults, then the settings the run fixes (:func:`run_settings`: one
instance, model, GPU, engine settings, KV blocks, workload), then the user's overrides, which win over
the run's values (``cluster.hardware=...`` fixes a run that names an unknown GPU). One override is a
suite run's own, not a config key: ``replay.prompts=pool`` (the default) replays each trace with
inference-perf's prompt pool (every ``user`` sends one fixed prompt again and again, so the prefix cache
holds it after its first round: :func:`~distsim.fidelity.suite.data.pool_trace`), ``replay.prompts=trace``
takes the trace as written.

:func:`simulated_frame` gives the replay's requests in the form :mod:`distsim.fidelity.metrics` reads, on
the measurement's clock, so both sides of every comparison go through one metric definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from distsim import inputs
from distsim.catalog.models import load_model
from distsim.config.compose import load_config
from distsim.config.schema import EngineConfig, LatencyConfig
from distsim.errors import UserError
from distsim.fidelity.metrics import metric_frame
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.suite.data import SuiteRun, pool_trace
from distsim.runner.overrides import from_lines
from distsim.simulate import SimulationResult, simulate
from distsim.workload.schema import WorkloadConfig
from distsim.workload.source import SYNTHETIC_ONLY

Run = MeasuredRun | SuiteRun
PROMPTS = "replay.prompts"  # a suite run's own override: pool (the default) | trace


def _overridden_keys(overrides: Sequence[str]) -> set[str]:
    """The keys the user set, from Hydra's parse of the overrides (``+x.y=1`` sets ``x.y``)."""
    return {o.key for o in from_lines(overrides)}


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], str]:
    """The config overrides and the ``replay.prompts`` value (``pool`` when not given)."""
    config, prompts = [], "pool"
    for line in overrides:
        key, sep, value = str(line).partition("=")
        if key.strip() != PROMPTS:
            config.append(line)
        elif not sep or value.strip() not in ("trace", "pool"):
            raise UserError(f"{PROMPTS} must be trace or pool (got {line!r})")
        else:
            prompts = value.strip()
    return config, prompts


def _suite_settings(run: SuiteRun, prompts: str) -> dict[str, Any]:
    values: dict[str, Any] = {
        "cluster.instances": 1,
        "cluster.pools": None,
        "cluster.hardware": "H100",
        "cluster.model": run.model,
        "cluster.latency.kind": LatencyConfig.kind,
        "workload.kind": "trace",
        "workload.format": "csv",
        "workload.path": str(pool_trace(run.trace) if prompts == "pool" else run.trace),
        "workload.num_requests": None,
        "workload.duration_s": None,
        "workload.prefix.groups": run.workload.num_system_prompts,
        "workload.prefix.tokens": run.workload.system_prompt_len,
        "workload.prefix.group_tokens": None,
        "workload.prefix.share": 0.0,
    }
    schema = WorkloadConfig()
    for name in SYNTHETIC_ONLY:  # the default workload's synthetic sections back to the schema's: a trace ignores them
        values[f"workload.{name}"] = getattr(schema, name)
    values.update(run.engine.overrides())
    blocks, context = run.engine.total_kv_blocks, load_model(run.model).max_position_embeddings
    block_size = run.engine.block_size or EngineConfig.block_size
    if blocks and run.engine.max_model_len is None and context > blocks * block_size:
        # the run records its KV blocks but not its max_model_len: vLLM started, so one max_model_len sequence
        # fit those blocks (Scout's 10M-token context does not fit 8,253 blocks); at most what they hold
        values["cluster.engine.max_model_len"] = blocks * block_size
    return values


def run_settings(run: Run, prompts: str = "pool") -> dict[str, Any]:
    """The config values (dotted keys) a run fixes."""
    if isinstance(run, SuiteRun):
        return _suite_settings(run, prompts)
    values: dict[str, Any] = {"cluster.instances": 1, "cluster.pools": None}
    if run.model:
        values["cluster.model"] = run.model
    if run.hardware:
        values["cluster.hardware"] = run.hardware
    if run.sampler:
        values["cluster.latency.serving.sampler"] = run.sampler
    values.update(run.engine.overrides())
    return values


def replay_config(run: Run, overrides: Sequence[str] = ()) -> DictConfig:
    """The composed config that replays ``run``: defaults, then the run's settings, then ``overrides``."""
    config_overrides, prompts = split_overrides(overrides)
    cfg = load_config(config_overrides)
    mine = _overridden_keys(config_overrides)
    for key, value in run_settings(run, prompts).items():
        if key not in mine:
            OmegaConf.update(cfg, key, value, merge=False)
    if isinstance(run, MeasuredRun):
        for key, what in (("hardware", "which GPU it ran on"), ("model", "which model it served")):
            if not getattr(run, key) and f"cluster.{key}" not in mine:
                raise UserError(
                    f"input error: {run.path}: the run does not say {what}; pass cluster.{key}=NAME"
                )
    return cfg


def replay(run: Run, cfg: DictConfig) -> SimulationResult:
    """One simulation of the run under ``cfg`` (see :func:`replay_config`)."""
    if isinstance(run, MeasuredRun):
        return simulate(cfg, requests=run.to_source(cfg.seed))  # closed-loop runs as they were sent
    return simulate(cfg)


def simulated_frame(run: Run, cfg: DictConfig) -> pd.DataFrame:
    """The replay's requests as :func:`~distsim.fidelity.metrics.stage_metrics` reads them, arrivals on
    the measurement's clock (a suite trace's own ``arrival_s``; a measured run counts from 0)."""
    offset = 0.0
    if isinstance(run, SuiteRun):
        offset = float(inputs.read_csv_frame(run.trace, usecols=["arrival_s"], nrows=1)["arrival_s"].iloc[0])
    return metric_frame(replay(run, cfg).requests, offset)


def stage_durations(run: Run) -> list[float]:
    """The run's load stages in seconds (a measured run: none, the whole run only)."""
    return [s.duration_s for s in run.workload.stages] if isinstance(run, SuiteRun) else []
