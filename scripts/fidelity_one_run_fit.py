"""Does a fit on one run of a GPU help that GPU's other runs? The check, on the shared H100 runs.

For each run id given: ``calibrate runs`` on that run alone (the default terms, regularised toward the
prior), then every other run of the folder replayed at the shipped defaults and at the fit's values;
printed: the terms the run pinned, and the other runs' median and mean |error| of mean E2E, TTFT and
ITL both ways, with how many figures moved by more than one point either way.

    python scripts/fidelity_one_run_fit.py 60 64 17      # about a minute per run on two idle cores
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT.parent / "shared" / "data" / "h100_vllm_runs"
METRICS = ["e2e_mean", "ttft_mean", "itl_mean"]


def whole_run(suite_csv: Path) -> pd.DataFrame:
    t = pd.read_csv(suite_csv, dtype={"run": str})
    t = t[t["stage"] == -1]
    return t.pivot_table(index=["run", "model"], columns="metric", values="error_pct")[METRICS]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="run ids of ../shared/data/h100_vllm_runs to fit on, one at a time")
    p.add_argument("--workers", type=int, default=2)
    ns = p.parse_args(argv)
    from distsim.calibrate import main as calibrate

    with tempfile.TemporaryDirectory() as tmp:
        base_dir = Path(tmp) / "base"
        if calibrate(["validate", str(RUNS), "--out", str(base_dir)]) != 0:
            return 1
        base = whole_run(base_dir / "suite.csv")
        for run in ns.runs:
            fit = Path(tmp) / f"fit_{run}.json"
            if calibrate(["runs", str(RUNS), "--runs", run, "--iterations", "2", "--workers", str(ns.workers), "--out", str(fit)]) != 0:
                return 1
            record = json.loads(fit.read_text())
            out = Path(tmp) / f"suite_{run}"
            if calibrate(["validate", str(RUNS), "--fit", str(fit), "--out", str(out)]) != 0:
                return 1
            got = whole_run(out / "suite.csv")
            model = base.loc[run].index[0]
            others = [i for i in base.index if i[1] != model]  # the fitted run's model left out altogether
            b, g = base.loc[others].abs(), got.loc[others].abs()
            pinned = [k for k, v in record["identifiability"]["terms"].items() if v["pinned"]]
            moved = {k: round(v, 4) for k, v in record["fit"]["values"].items() if k in pinned}
            print(f"\nfit on run {run} ({model}): pinned {moved or 'nothing'}")
            print(f"  its own |error| {dict(base.loc[run].abs().iloc[0].round(1))} -> {dict(got.loc[run].abs().iloc[0].round(1))}")
            print(f"  the other {len(others)} runs, median |error| at the defaults {dict(b.median().round(2))}, after the fit {dict(g.median().round(2))}")
            print(f"  mean |error| {dict(b.mean().round(2))} -> {dict(g.mean().round(2))}; "
                  f"figures worse by > 1 point: {int(((g - b) > 1).sum().sum())}, better by > 1 point: {int(((g - b) < -1).sum().sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
