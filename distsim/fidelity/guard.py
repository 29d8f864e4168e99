"""The fidelity guard (issue 24, item 6): the shipped defaults scored on the step tables and on a fixed
slice of the measured runs, against the figures docs/fidelity.md records.

The script that writes docs/fidelity.md (``scripts/fidelity_h100.py``) also writes the same figures,
measured by :func:`figures`, into ``docs/data/fidelity_guard.json``; tests/test_fidelity_guard.py
measures them again and fails when one rises more than :data:`TOLERANCE` points above the record. So
the doc and the guard read one set of numbers, and fidelity only moves on purpose (rerun the script,
commit the doc and the record together).

Figures (all in percent, absolute errors; lower is better):

- ``steps``: per step table, the mean absolute error of ``gpu_step_us`` against the measured GPU time
  (:mod:`distsim.fidelity.steps.cli`, the tables it reads, at the shipped defaults);
- ``runs``: per run of :data:`RUN_SLICE` (the smallest run of each model in ../shared/data/h100_vllm_runs,
  about 7 s of replays in all), the absolute whole-run error of mean E2E, mean TTFT and mean ITL;
- ``runs_median``: the median of each of those three over the slice.

    python -m distsim.fidelity.guard [--write docs/data/fidelity_guard.json]   # print (or write) them
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distsim import outputs
from distsim.errors import UserError

TOLERANCE = 1.0  # points an error may rise above the recorded figure before the guard fails
RUN_SLICE = ("48", "60", "62", "65", "66", "67")  # one run per model: Scout, 70B, Nemo, Yi, Qwen, Llama-2
RUN_METRICS = ("e2e_mean", "ttft_mean", "itl_mean")
ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
RECORD = ROOT / "docs" / "data" / "fidelity_guard.json"


def step_figures(folder: str | Path) -> dict[str, float]:
    """Mean absolute step error (%) per table at the shipped defaults."""
    from distsim.fidelity.steps.cli import run_steps

    steps = run_steps(folder).steps
    return {
        str(name): round(float(group["error_pct"].abs().mean()), 3)
        for name, group in steps.groupby("model", sort=False)
    }


def run_figures(folder: str | Path, runs: Sequence[str] = RUN_SLICE) -> dict[str, dict[str, float]]:
    """Absolute whole-run errors (%) of mean E2E, TTFT and ITL per run of the slice."""
    from distsim.fidelity.suite.data import read_suite
    from distsim.fidelity.suite.replay import headline, replay_suite

    result = replay_suite(read_suite(folder), (), list(runs))
    missing = [r for r in runs if r not in set(result.table["run"].astype(str))]
    if missing:
        raise RuntimeError(f"runs not replayed: {', '.join(missing)} ({result.skipped})")
    errs = headline(result.table, "error_pct", RUN_METRICS).abs()
    return {str(run): {m: round(float(row[m]), 3) for m in RUN_METRICS} for run, row in errs.iterrows()}


def figures(shared: str | Path = SHARED) -> dict[str, Any]:
    """Every guarded figure, measured now at the shipped defaults."""
    shared = Path(shared)
    runs = run_figures(shared / "h100_vllm_runs")
    medians = {m: round(_median([v[m] for v in runs.values()]), 3) for m in RUN_METRICS}
    return {
        "tolerance_points": TOLERANCE,
        "steps": step_figures(shared / "h100_steps"),
        "run_slice": list(RUN_SLICE),
        "runs": runs,
        "runs_median": medians,
    }


def _median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2.0


def _flat(figs: dict[str, Any]) -> dict[str, float]:
    out = {f"steps/{k}": v for k, v in figs["steps"].items()}
    for run, errs in figs["runs"].items():
        out.update({f"runs/{run}/{m}": v for m, v in errs.items()})
    out.update({f"runs_median/{m}": v for m, v in figs["runs_median"].items()})
    return out


def violations(recorded: dict[str, Any], now: dict[str, Any], tolerance: float = TOLERANCE) -> list[str]:
    """Each figure that rose more than ``tolerance`` points above its record, or that is missing."""
    rec, cur = _flat(recorded), _flat(now)
    out = []
    for key, value in rec.items():
        got = cur.get(key)
        if got is None or not math.isfinite(got):
            out.append(f"{key}: recorded {value:.2f}%, now missing")
        elif got > value + tolerance:
            out.append(f"{key}: {got:.2f}% now, {value:.2f}% recorded (+{got - value:.2f} points)")
    out += [f"{key}: {cur[key]:.2f}% now, not recorded" for key in cur if key not in rec]
    return out


def write(path: Path = RECORD, shared: str | Path = SHARED) -> dict[str, Any]:
    figs = figures(shared)
    outputs.write_text(outputs.prepare_file(path), json.dumps(figs, indent=2, sort_keys=False) + "\n")
    return figs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m distsim.fidelity.guard", description=__doc__.splitlines()[0])
    p.add_argument("--write", nargs="?", const=str(RECORD), default=None, help="write the record (default path)")
    p.add_argument("--shared", default=str(SHARED), help="the folder holding h100_steps and h100_vllm_runs")
    args = p.parse_args(argv)
    try:
        figs = write(Path(args.write), args.shared) if args.write else figures(args.shared)
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        return 2
    print(json.dumps(figs, indent=2))
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim", main)  # a full or closed stdout, and Ctrl-C, as one line
