"""Run one job: derive its config, simulate, write its directory, return its row.

This is the whole of a worker's work and runs the same inside a Ray actor or in-process. The job's
config is unpickled fresh from its configuration's composed bytes and only the seed is set, so no job
sees another's config object; the global RNGs are reseeded so that no code path can carry random state
from one job to the next in a long-lived worker.
"""

from __future__ import annotations

import os
import pickle
import random
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from omegaconf import DictConfig, OmegaConf

from distsim import outputs
from distsim.errors import OutputError, UserError
from distsim.runner import faults, store
from distsim.runner.overrides import texts
from distsim.runner.plan import Job
from distsim.runner.rows import OUTPUT_FAILED, RUN_PREFIX, base_row, failed_row, flatten
from distsim.simulate import simulate


def derive_config(config_bytes: bytes, job: Job) -> DictConfig:
    """The job's config: its configuration's composed config with the job's seed set."""
    cfg = pickle.loads(config_bytes)
    if job.seed is not None:
        cfg.seed = job.seed
    return cfg


def _record_config(out: Path, cfg: DictConfig, job: Job) -> None:
    """A .hydra-like record of what ran, as a single run leaves one."""
    hydra_dir = outputs.prepare_dir(out / ".hydra")
    outputs.write_text(hydra_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    outputs.write_text(hydra_dir / "overrides.yaml", yaml.safe_dump(texts(job.overrides), default_flow_style=False))


def _run_info(t0: float) -> dict[str, Any]:
    return {
        RUN_PREFIX + "wall_s": round(time.perf_counter() - t0, 4),
        RUN_PREFIX + "host": socket.gethostname(),
        RUN_PREFIX + "pid": os.getpid(),
        RUN_PREFIX + "niceness": os.nice(0),  # the worker's priority (runner.worker_niceness)
    }


def execute(
    job: Job, config_bytes: bytes, sweep_dir: str, run_info: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Simulate ``job`` and write its outputs to ``sweep_dir/<index>/``; never raises for a job's error.

    ``run_info`` adds ``run.*`` fields (e.g. the Ray node) to the row."""
    t0 = time.perf_counter()
    try:
        out = outputs.prepare_dir(store.job_dir(sweep_dir, job.index))
        outputs.remove([out / store.RESULT_FILE, out / "error.txt"])  # a stale marker must not outlive a rerun
    except OutputError as err:  # the job's folder or marker cannot be used (a folder named result.json): one line
        row = failed_row(job, str(err), OUTPUT_FAILED)
        row.update(_run_info(t0))
        return {**row, **(run_info or {})}
    policy = seed = None
    try:
        cfg = derive_config(config_bytes, job)
        policy = OmegaConf.select(cfg, "policy.name", default=None)
        seed = int(cfg.seed) if cfg.seed is not None else None
        random.seed(seed)
        np.random.seed((seed or 0) % 2**32)
        _record_config(out, cfg, job)
        faults.inject(job.index)
        result = simulate(cfg)
        with faults.full_disk(job.index):
            result.write(out, write_requests=bool(cfg.sim.write_requests))
        row = base_row(job, policy=policy, seed=seed)
        row.update(flatten(result.summary))
    except OutputError as err:  # the machine's (a full disk), not the config's: a search must not score it
        row = failed_row(job, str(err), OUTPUT_FAILED, policy=policy, seed=seed)
    except UserError as err:
        row = failed_row(job, str(err), "user", policy=policy, seed=seed)
    except Exception as err:  # a bug in the simulator: record it, keep the sweep going
        outputs.write_text(out / "error.txt", traceback.format_exc())
        row = failed_row(job, f"{type(err).__name__}: {err}", "exception", policy=policy, seed=seed)
    row.update(_run_info(t0))
    row.update(run_info or {})
    store.write_result(out, row)
    return row
