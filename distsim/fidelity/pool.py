"""Replaying runs with candidate config values, in worker processes (the serving fit).

One evaluation of a fit replays every run in full (:mod:`distsim.fidelity.replay`, either kind of run); the runs are independent, so they go to a
``ProcessPoolExecutor``, the longest first (fewest idle workers at the end), and come back in run
order. Each replay is deterministic (no ``hash()``, seeded draws), so the answers do not depend on the
number of workers or on which worker ran which run. A worker keeps the composed config of every run it
has replayed (Hydra's compose costs about as much as a small replay) and sends back only the replay's
per-stage metrics, not its request table.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from distsim.errors import UserError
from distsim.fidelity.metrics import stage_metrics
from distsim.fidelity.replay import Run, replay_config, simulated_frame, stage_durations

Values = tuple[tuple[str, float], ...]  # (config key, value), in the parameters' order


@dataclass(frozen=True)
class Replay:
    """One run replayed with one set of values: its per-stage metrics, or why it failed."""

    run_id: str
    metrics: pd.DataFrame | None  # stage_metrics of the replay; None when it failed
    requests: int
    completed: int
    seconds: float
    failure: str | None = None
    warnings: tuple[str, ...] = ()


# per process: (run id, its file, overrides, keys) -> the run's config, its keys rewritten in place by every replay
# (a copy costs a third of a small replay)
_CONFIGS: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], DictConfig] = {}


def _config(run: Run, overrides: tuple[str, ...], values: Values) -> DictConfig:
    key = (run.id, str(getattr(run, "path", "")), overrides, tuple(name for name, _ in values))
    if key not in _CONFIGS:
        _CONFIGS[key] = replay_config(run, overrides)
    cfg = _CONFIGS[key]
    for name, value in values:
        OmegaConf.update(cfg, name, float(value), merge=False)
    return cfg


def replay_run(run: Run, overrides: tuple[str, ...], values: Values) -> Replay:
    """Replay ``run`` with the suite's settings, ``overrides`` and ``values`` on top; a user error (a
    value the config refuses) is a failed replay, not an exception, so one bad candidate costs one term."""
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            simulated = simulated_frame(run, _config(run, overrides, values))
        except UserError as err:
            return Replay(run.id, None, 0, 0, time.perf_counter() - started, str(err))
    notes = tuple(dict.fromkeys(str(w.message) for w in caught))
    metrics = stage_metrics(simulated, stage_durations(run))
    done = int(simulated["completed"].sum())
    return Replay(run.id, metrics, len(simulated), done, time.perf_counter() - started, None, notes)


class ReplayPool:
    """Replays runs in ``workers`` processes (in this process when 1); use as a context manager."""

    def __init__(self, overrides: Sequence[str] = (), workers: int = 1):
        self.overrides = tuple(overrides)
        self.workers = workers
        self.executor = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None

    def replay(self, runs: Sequence[Run], values: dict[str, float]) -> list[Replay]:
        """Every run of ``runs`` with ``values``, in the order of ``runs``."""
        items: Values = tuple((k, float(v)) for k, v in values.items())
        if self.executor is None:
            return [replay_run(r, self.overrides, items) for r in runs]
        order = sorted(range(len(runs)), key=lambda i: (-runs[i].num_requests, i))  # longest first
        done = self.executor.map(replay_run, [runs[i] for i in order], repeat(self.overrides), repeat(items))
        by_index = dict(zip(order, done))
        return [by_index[i] for i in range(len(runs))]

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)

    def __enter__(self) -> ReplayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
