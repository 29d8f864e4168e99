"""Run a sweep from Python, exactly as ``python -m distsim -m ARGS hydra.sweep.dir=DIR`` would.

Tests, benchmarks and the evolutionary search use this to share one Ray session across sweeps (a Ray
this process already initialised is reused and left running).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from distsim.config.compose import CONF_DIR
from distsim.config.schema import register_schemas
from distsim.runner.outcome import SweepOutcome
from distsim.runner.overrides import texts
from distsim.runner.plan import plan_sweep
from distsim.runner.settings import RunnerSettings
from distsim.runner.sweep import run_sweep


def sweep(
    arguments: Sequence[str], sweep_dir: str | os.PathLike, *, echo: bool = True, **runner: Any
) -> SweepOutcome:
    """``arguments`` are command-line overrides (``"policy=a,b"``, ``"seed=range(3)"``); ``runner``
    keyword arguments set ``runner.*`` (e.g. ``num_workers=2``)."""
    register_schemas()
    args = [*arguments, *(f"runner.{k}={'null' if v is None else v}" for k, v in runner.items())]
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="distsim"):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        plan = plan_sweep(args, parser)
        settings = RunnerSettings.from_node(
            compose(config_name="config", overrides=texts(plan.runner_overrides)).runner
        )
        return run_sweep(
            plan, lambda ovs: compose(config_name="config", overrides=ovs), sweep_dir, settings, echo=echo
        )
