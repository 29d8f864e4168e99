"""The held-out errors behind every prediction interval, and their coverage.

1. Each model of the shared H100 runs (../shared/data/h100_vllm_runs) left out in turn: its runs replayed
   at the serving terms fitted without it (docs/data/h100_runfit.json's leave-one-model-out values, on the
   shipped GPU terms); per run the whole-run mean and p99 of TTFT and E2E and the mean ITL, simulated and
   measured, into distsim/catalog/data/heldout_errors.csv (what distsim.catalog.intervals reads).
2. The coverage of the 90% interval on those runs, each model held out of the interval too
   (distsim.catalog.intervals.coverage), printed by GPU, family and metric.

    python scripts/fidelity_intervals.py            # about a minute
    python scripts/fidelity_intervals.py --no-write # coverage of the shipped table only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
RUNFIT = ROOT / "docs" / "data" / "h100_runfit.json"
OUT = ROOT / "distsim" / "catalog" / "data" / "heldout_errors.csv"
METRICS = ("e2e_mean", "e2e_p99", "ttft_mean", "ttft_p99", "itl_mean")


def heldout_table() -> pd.DataFrame:
    from distsim.catalog.intervals import family_of
    from distsim.catalog.models import load_model
    from distsim.fidelity.metrics import WHOLE_RUN
    from distsim.fidelity.suite.data import read_suite
    from distsim.fidelity.suite.replay import fit_runs, replay_suite

    suite = read_suite(SHARED / "h100_vllm_runs")
    folds = json.loads(RUNFIT.read_text(encoding="utf-8"))["lomo"]["values"]
    runs, _ = fit_runs(suite)
    parts = []
    for model, values in folds.items():
        mine = [r for r in runs if r.model_name == model]
        ids = [r.id for r in mine]
        overrides = [f"{k}={v!r}" for k, v in values.items()]
        result = replay_suite(suite, overrides, ids, progress=lambda line: print(line, file=sys.stderr))
        t = result.table
        t = t[(t["stage"] == WHOLE_RUN) & t["metric"].isin(METRICS)]
        parts.append(t.assign(gpu="H100", family=family_of(load_model(mine[0].model)))[
            ["gpu", "family", "model", "run", "metric", "measured", "simulated"]])
    table = pd.concat(parts, ignore_index=True).sort_values(["model", "run", "metric"], kind="stable")
    return table.round({"measured": 4, "simulated": 4})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-write", action="store_true", help="report the shipped table's coverage only")
    ns = p.parse_args(argv)
    from distsim.catalog import intervals

    if ns.no_write:
        table = intervals.heldout_errors()
    else:
        table = heldout_table()
        table.to_csv(OUT, index=False)
        print(f"wrote {OUT.relative_to(ROOT)} ({len(table)} rows, {table['run'].nunique()} runs)")
    cov = intervals.coverage(table)
    print(f"90% interval, each model held out of the calibration and of the interval: "
          f"{cov['covered'].mean():.1%} of {len(cov)} figures covered")
    print(cov.groupby(["gpu", "basis_family", "metric"])["covered"].agg(["mean", "size"]).round(3).to_string())
    print(cov.groupby("model")["covered"].agg(["mean", "size"]).round(3).to_string())
    q = intervals.for_pool("H100", "dense", table)
    if q is not None:
        print("H100 dense bounds (x e^+-q):", {m: round(v, 4) for m, v in q[0].items()}, "-", q[1].text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
