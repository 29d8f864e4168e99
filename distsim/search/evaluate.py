"""Evaluate configurations on seeds through the sweep runner (the same Ray actor pool and job code as
``python -m distsim -m``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose

from distsim.runner.plan import Job, SweepPlan
from distsim.runner.settings import RunnerSettings
from distsim.runner.sweep import run_sweep


def make_evaluator(runner_node: Any, *, config_name: str = "search", echo: bool = False):
    """Jobs compose ``config_name`` (the search's own primary config), so the scenario it sets
    (cluster, workload, SLOs) applies to every evaluation."""
    settings = RunnerSettings.from_node(runner_node)

    def evaluate(configs: list[list[str]], seeds: list[int], sweep_dir: Path) -> pd.DataFrame:
        jobs = []
        for config in configs:
            for seed in seeds:
                override = f"seed={seed}"
                jobs.append(Job(len(jobs), (*config, override), tuple(config), seed, override))
        plan = SweepPlan(jobs, (), ("seed",))
        outcome = run_sweep(
            plan, lambda ovs: compose(config_name=config_name, overrides=ovs), sweep_dir, settings, echo=echo
        )
        return outcome.results

    return evaluate
