"""Compose each distinct configuration of a sweep once, and ship it as pickled bytes.

A Hydra compose costs about 100 ms; a sweep of k configurations x n seeds composes k times, and each job's
config is the configuration's bytes unpickled with the seed set (distsim.runner.job.derive_config). Hydra's
own node is dropped: workers get what ``load_config`` returns, so a job equals the same overrides run alone.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf, flag_override

from distsim.config.compose import composition_error
from distsim.errors import UserError
from distsim.provenance import mark as mark_user_set
from distsim.runner.overrides import texts
from distsim.runner.plan import Job, SweepPlan

Composer = Callable[[list[str]], DictConfig]


def compose_key(job: Job) -> str:
    """Jobs with the same key share one composed config (a non-literal seed is composed per job)."""
    return job.overrides_str if job.seed_override is not None and job.seed is None else job.config_key


def _compose_overrides(job: Job, plan: SweepPlan) -> list[str]:
    own = job.overrides if compose_key(job) == job.overrides_str else job.config
    return texts([*own, *plan.runner_overrides])


def task_config(cfg: DictConfig) -> DictConfig:
    """The composed config without Hydra's own node, as ``load_config`` returns it."""
    if "hydra" in cfg:
        with flag_override(cfg, ["struct", "readonly"], [False, False]):
            del cfg["hydra"]
    OmegaConf.set_readonly(cfg, False)
    return cfg


def compose_all(jobs: Sequence[Job], plan: SweepPlan, compose: Composer) -> dict[str, bytes]:
    blobs: dict[str, bytes] = {}
    for job in jobs:
        key = compose_key(job)
        if key not in blobs:
            try:
                cfg = compose(_compose_overrides(job, plan))
            except UserError:
                raise
            except Exception as err:  # Hydra's and OmegaConf's composition errors: the user's overrides
                raise composition_error(err) from None
            cfg = mark_user_set(task_config(cfg), _compose_overrides(job, plan))
            if plan.check_configs:
                _check_configuration(cfg, job)
            blobs[key] = pickle.dumps(cfg)
    return blobs


def _check_configuration(cfg: DictConfig, job: Job) -> None:
    """Resolve the configuration (distsim.resolve.resolve) so a bad value in any section stops
    the sweep before its first job, with one line naming the key and the configuration."""
    from distsim.config.regret import regret_settings
    from distsim.errors import ConfigError
    from distsim.resolve import resolve

    try:
        resolve(cfg)
        if regret_settings(cfg).enabled:  # a sweep's jobs would not replay: refused, never ignored
            raise ConfigError("regret.samples", "replays a single run's decisions: run without -m")
    except UserError as err:
        label = " ".join(texts(job.config)) or "(no overrides)"
        raise UserError(f"{err} (configuration: {label})") from None
