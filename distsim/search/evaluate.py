"""Evaluate configurations on seeds through the sweep runner (the same Ray actor pool and job code as
``python -m distsim -m``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hydra import compose
from omegaconf import DictConfig

from distsim.runner.overrides import Override, from_lines
from distsim.runner.plan import SEED_KEY, Job, SweepPlan
from distsim.runner.rows import stop_on_output_failures
from distsim.runner.settings import RunnerSettings
from distsim.runner.sweep import run_sweep


def search_plan(configs: list[list[str]], seeds: list[int]) -> SweepPlan:
    """Every config on every seed, config by config. Each config is parsed once into typed overrides;
    their text stays as written, since it names the jobs an earlier run left on disk (resume)."""
    jobs = []
    for config in configs:
        parsed = tuple(from_lines(config))
        for seed in seeds:
            seed_ovr = Override.of(SEED_KEY, seed, str(seed))
            jobs.append(Job(len(jobs), (*parsed, seed_ovr), parsed, seed, seed_ovr))
    return SweepPlan(jobs, (), (SEED_KEY,), check_configs=False)


def make_evaluator(runner_node: DictConfig | None, *, config_name: str = "search", echo: bool = False):
    """Jobs compose ``config_name`` (the search's own primary config), so the scenario it sets
    (cluster, workload, SLOs) applies to every evaluation."""
    settings = RunnerSettings.from_node(runner_node)

    def evaluate(configs: list[list[str]], seeds: list[int], sweep_dir: Path) -> pd.DataFrame:
        outcome = run_sweep(
            search_plan(configs, seeds),
            lambda ovs: compose(config_name=config_name, overrides=ovs),
            sweep_dir,
            settings,
            echo=echo,
        )
        stop_on_output_failures(outcome.results, sweep_dir)  # a full disk: not a candidate's failure to score
        outcome.results.attrs["resumed"] = outcome.resumed  # for the search's ETA (distsim.search.progress)
        return outcome.results

    return evaluate
