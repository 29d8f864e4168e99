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
        """validation.json: per metric measured, simulated, error_pct, and the simulated figure's 90%
        interval (summary.json's ``prediction_interval``; null where there is none) with whether the
        measured value lies in it."""
        out = comparison_json(self.comparison)
        for key, row in out.items():
            band = self.interval(key)
            row["interval"] = band
            row["covered"] = None if band is None or row["measured"] is None else band[0] <= row["measured"] <= band[1]
        return out

    def interval(self, metric: str) -> list[float] | None:
        """The simulated ``metric``'s ("ttft_ms.mean") 90% interval, or None."""
        figure, stat = metric.split(".")
        return ((self.result.summary.get("prediction_interval") or {}).get(figure) or {}).get(stat)

    def interval_line(self) -> str:
        """How many measured figures lie in their interval, and the interval's basis, in one line."""
        pi = self.result.summary.get("prediction_interval") or {}
        rows = [r for r in self.to_json().values() if r["covered"] is not None]
        if not rows:
            return f"prediction interval: {pi.get('basis', 'none')}"
        inside = sum(r["covered"] for r in rows)
        return (f"{pi['level']:.0%} prediction interval ({pi['basis']}): the measured value inside it for "
                f"{inside} of {len(rows)} figures")


def validate(run: str | Path | MeasuredRun, overrides: Sequence[str] = ()) -> Validation:
    """Replay ``run`` (a path or a read run) and compare measured with simulated latencies."""
    if not isinstance(run, MeasuredRun):
        run = read_run(run)
    cfg = replay_config(run, overrides)
    result = replay(run, cfg)
    done = result.requests[result.requests["status"] == "completed"]
    return Validation(run, cfg, result, compare(run.requests, done))
