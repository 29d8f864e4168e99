"""One measured run replayed and compared: the :class:`Validation` that ``python -m distsim.validate`` prints
and writes, and that the fidelity reports read (so it lives in this package, below the command)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from distsim.fidelity.metrics import MetricComparison, compare, comparison_json
from distsim.fidelity.readers import read_run
from distsim.fidelity.replay import replay, replay_config
from distsim.fidelity.run import MeasuredRun
from distsim.simulate import SimulationResult


@dataclass
class Validation:
    run: MeasuredRun
    config: DictConfig
    result: SimulationResult
    comparison: dict[str, MetricComparison]

    def to_json(self) -> dict:
        return comparison_json(self.comparison)


def validate(run: str | Path | MeasuredRun, overrides: Sequence[str] = ()) -> Validation:
    """Replay ``run`` (a path or a read run) and compare measured with simulated latencies."""
    if not isinstance(run, MeasuredRun):
        run = read_run(run)
    cfg = replay_config(run, overrides)
    result = replay(run, cfg)
    done = result.requests[result.requests["status"] == "completed"]
    return Validation(run, cfg, result, compare(run.requests, done))
