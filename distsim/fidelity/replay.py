"""Simulate exactly the requests of a measured run, on the engine it was measured with.

The config is the embedded default with one instance, the run's model, GPU and recorded engine
settings (KV block count included) and the user's overrides on top: a user override of a key wins
over the run's value, so ``cluster.hardware=...`` fixes a run that names an unknown GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from distsim.config.compose import load_config
from distsim.errors import UserError
from distsim.fidelity.run import MeasuredRun
from distsim.runner.overrides import from_lines
from distsim.simulate import SimulationResult, simulate


def _overridden_keys(overrides: Sequence[str]) -> set[str]:
    """The keys the user set, from Hydra's parse of the overrides (``+x.y=1`` sets ``x.y``)."""
    return {o.key for o in from_lines(overrides)}


def run_settings(run: MeasuredRun) -> dict[str, Any]:
    """The config values a run fixes (dotted keys)."""
    values: dict[str, Any] = {"cluster.instances": 1, "cluster.pools": None}
    if run.model:
        values["cluster.model"] = run.model
    if run.hardware:
        values["cluster.hardware"] = run.hardware
    values.update(run.engine.overrides())
    return values


def replay_config(run: MeasuredRun, overrides: Sequence[str] = ()) -> DictConfig:
    """The composed config that replays ``run``: defaults, then the run's settings, then ``overrides``."""
    overrides = list(overrides)
    cfg = load_config(overrides)
    mine = _overridden_keys(overrides)
    for key, value in run_settings(run).items():
        if key not in mine:
            OmegaConf.update(cfg, key, value, merge=False)
    if not run.hardware and "cluster.hardware" not in mine:
        raise UserError(
            f"input error: {run.path}: the run does not say which GPU it ran on; pass cluster.hardware=NAME"
        )
    if not run.model and "cluster.model" not in mine:
        raise UserError(
            f"input error: {run.path}: the run does not say which model it served; pass cluster.model=NAME"
        )
    return cfg


def replay(run: MeasuredRun, cfg: DictConfig) -> SimulationResult:
    """One simulation of the run's requests under ``cfg`` (see :func:`replay_config`)."""
    return simulate(cfg, requests=run.to_requests())
