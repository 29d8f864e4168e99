"""Replay every run of a folder of measured runs and tabulate the errors (``validate`` on a folder).

    python -m distsim.calibrate validate ../shared/data/h100_vllm_runs [overrides...] --out DIR [--runs IDS]

Each run (:mod:`distsim.fidelity.suite.data`) is replayed on one instance by the one replay path
(:mod:`distsim.fidelity.replay`: its settings, its trace, ``replay.prompts``), overrides on top
(``workload.num_requests=200`` caps a replay). The simulated requests give the same per-stage metrics
by the same definitions (:func:`distsim.fidelity.metrics.stage_metrics`); error % = (simulated -
measured) / measured x 100.

Writes DIR/suite.csv (one row per run, stage and metric, with each peer's recorded ``mpe``) and
DIR/suite.md (per-run errors of mean E2E, TTFT, ITL and the medians of their absolute values beside the
peers' medians over the same runs), and prints the medians. A run whose model does not load, or that
has no measurements, is listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from distsim import outputs
from distsim.catalog.models import load_model
from distsim.config.compose import load_config
from distsim.errors import UserError
from distsim.fidelity.metrics import STAGE_METRICS, WHOLE_RUN, error_pct, stage_metrics
from distsim.fidelity.replay import replay_config as suite_config
from distsim.fidelity.replay import simulated_frame as simulated_requests
from distsim.fidelity.replay import split_overrides
from distsim.fidelity.suite.data import Suite, SuiteRun, parse_ids, read_suite

HEADLINE = ("e2e_mean", "ttft_mean", "itl_mean")
DISTSIM = "distsim"
TABLE_COLUMNS = ("run", "model", "tp", "workload", "stage", "metric", "measured", "simulated", "error_pct")


@dataclass
class SuiteResult:
    table: pd.DataFrame  # TABLE_COLUMNS + one ``mpe_<peer>`` column per peer
    peers: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run id, reason)
    notes: dict[str, list[str]] = field(default_factory=dict)  # run id -> what the replay leaves out
    seconds: dict[str, float] = field(default_factory=dict)  # run id -> wall time of its replay


def compare_run(run: SuiteRun, simulated: pd.DataFrame, measured: pd.DataFrame, peers: list[str]) -> pd.DataFrame:
    """suite.csv's rows for one run: every (stage, metric) measured, with the peers' ``mpe``."""
    durations = [s.duration_s for s in run.workload.stages]
    return compare_metrics(run, stage_metrics(simulated, durations), measured, peers)


def compare_metrics(run: SuiteRun, metrics: pd.DataFrame, measured: pd.DataFrame, peers: list[str]) -> pd.DataFrame:
    """:func:`compare_run` from the replay's :func:`stage_metrics` (what a worker process sends back)."""
    sim = metrics.set_index(["stage", "metric"])["value"]
    actual = measured.drop_duplicates(["stage_index", "metric_name"]).set_index(["stage_index", "metric_name"])
    mpe = measured.pivot_table(index=["stage_index", "metric_name"], columns="simulator", values="mpe")
    rows = []
    for (stage, metric), m in actual["actual"].items():
        s = float(sim.get((stage, metric), math.nan))
        row = [run.id, run.model_name, run.tp, run.workload.name, stage, metric, float(m), s, error_pct(m, s)]
        row += [float(mpe[p].get((stage, metric), math.nan)) if p in mpe else math.nan for p in peers]
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, *(f"mpe_{p}" for p in peers)])
    order = {m: i for i, m in enumerate(STAGE_METRICS)}
    table["_metric"] = table["metric"].map(order).fillna(len(order))
    table = table.sort_values(["stage", "_metric"], kind="stable")
    return table.drop(columns=["_metric"]).reset_index(drop=True)


def skip_reason(run: SuiteRun, suite: Suite) -> str | None:
    """Why ``run`` cannot be compared now (None: it can)."""
    if suite.measured_for(run).empty:
        return "no records in measured.csv"
    try:
        load_model(run.model)
    except UserError as err:
        return f"model does not load: {err}"
    return None


def fit_runs(suite: Suite, ids: Sequence[str] | None = None) -> tuple[list[SuiteRun], list[tuple[str, str]]]:
    """The runs to fit (those of ``ids``, or all) that can be compared, and (id, reason) for the rest."""
    runs, skipped = [], []
    for run in suite.select(ids):
        reason = skip_reason(run, suite)
        if reason is None:
            runs.append(run)
        else:
            skipped.append((run.id, reason))
    if not runs:
        raise UserError(
            f"no run of {suite.root} can be fitted: " + "; ".join(f"{i}: {w}" for i, w in skipped)
        )
    return runs, skipped


# long: the loop over runs with its skip, timing and progress bookkeeping reads best in one place
def replay_suite(
    suite: Suite,
    overrides: Sequence[str] = (),
    runs: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> SuiteResult:
    """Replay the suite's runs (those in ``runs`` by id, or all) and compare them with the measurements."""
    selected = suite.select(runs)  # an unknown id stops here, before any replay
    load_config(split_overrides(overrides)[0])  # a bad override stops here, once, not once per run
    peers = sorted(suite.measured["simulator"].unique())
    result = SuiteResult(pd.DataFrame(columns=[*TABLE_COLUMNS, *(f"mpe_{p}" for p in peers)]), peers)
    tables = []
    for run in selected:
        reason = skip_reason(run, suite)
        if reason is None:
            started = time.perf_counter()
            try:
                simulated = simulated_requests(run, suite_config(run, overrides))
            except UserError as err:
                reason = f"replay failed: {err}"
        if reason is not None:
            result.skipped.append((run.id, reason))
            if progress:
                progress(f"run {run.id}: skipped: {reason}")
            continue
        result.seconds[run.id] = time.perf_counter() - started
        done = int(simulated["completed"].sum())
        unfinished = [] if done == len(simulated) else [f"{done} of {len(simulated)} requests completed"]
        result.notes[run.id] = run.flags() + unfinished
        tables.append(compare_run(run, simulated, suite.measured_for(run), peers))
        if progress:
            progress(f"run {run.id}: {len(simulated)} requests replayed in {result.seconds[run.id]:.1f} s")
    if tables:
        result.table = pd.concat(tables, ignore_index=True)
    return result


def headline(table: pd.DataFrame, column: str, metrics: Sequence[str] = HEADLINE) -> pd.DataFrame:
    """Whole-run values of ``column`` for ``metrics`` (default :data:`HEADLINE`): one row per run."""
    whole = table[(table["stage"] == WHOLE_RUN) & table["metric"].isin(metrics)]
    return whole.pivot_table(index="run", columns="metric", values=column, sort=False).reindex(columns=list(metrics))


def medians(result: SuiteResult, metrics: Sequence[str] = HEADLINE) -> pd.DataFrame:
    """Median absolute whole-run error (%) of ``metrics`` (default mean E2E, TTFT, ITL) over the compared
    runs, for distsim and each peer (a peer over those of the runs it has a figure for); ``runs`` counts
    the first metric's figures."""
    rows = []
    for name, column in ((DISTSIM, "error_pct"), *((p, f"mpe_{p}") for p in result.peers)):
        errs = headline(result.table, column, metrics).abs() if len(result.table) else pd.DataFrame(columns=metrics)
        rows.append([name, int(errs[metrics[0]].notna().sum()), *(float(errs[m].median()) for m in metrics)])
    return pd.DataFrame(rows, columns=["simulator", "runs", *metrics])


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1f}%"


def metric_label(metric: str) -> str:
    """``e2e_p99`` -> ``p99 E2E``."""
    name, stat = metric.split("_")
    return f"{stat} {name.upper()}"


def medians_table(frame: pd.DataFrame, metrics: Sequence[str] = HEADLINE) -> str:
    """A :func:`medians` frame (or rows stacked from several) as a Markdown table."""
    lines = ["| simulator | runs | " + " | ".join(metric_label(m) for m in metrics) + " |",
             "|---|---:|" + "---:|" * len(metrics)]
    for row in frame.to_dict("records"):
        cells = ["n/a" if not math.isfinite(row[m]) else f"{row[m]:.1f}%" for m in metrics]
        lines.append(f"| {row['simulator']} | {row['runs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def medians_markdown(result: SuiteResult, metrics: Sequence[str] = HEADLINE) -> str:
    return medians_table(medians(result, metrics), metrics)


def runs_markdown(result: SuiteResult, metrics: Sequence[str] = HEADLINE) -> str:
    lines = [
        "| run | model | TP | workload | " + " | ".join(metric_label(m) for m in metrics) + " | notes |",
        "|---|---|---:|---|" + "---:|" * len(metrics) + "---|",
    ]
    if not len(result.table):
        return "\n".join(lines)
    errs = headline(result.table, "error_pct", metrics)
    info = result.table.drop_duplicates("run").set_index("run")
    for run, row in errs.iterrows():
        cells = " | ".join(_pct(row[m]) for m in metrics)
        notes = "; ".join(result.notes.get(run, []))
        lines.append(f"| {run} | {info.at[run, 'model']} | {info.at[run, 'tp']} | {info.at[run, 'workload']} "
                     f"| {cells} | {notes} |")
    return "\n".join(lines)


def render_markdown(result: SuiteResult, folder: str, overrides: Sequence[str]) -> str:
    """suite.md: the command's inputs, per-run errors, medians, skipped runs."""
    extra = " ".join(overrides) or "(none)"
    parts = [
        f"# Replay of {folder}", "",
        f"Overrides: {extra}. Error = (simulated - measured) / measured, whole run, positive = simulator slower.",
        "", "## Per run", "", runs_markdown(result), "",
        "## Median absolute error over runs (peers: their recorded mpe on the same runs)", "",
        medians_markdown(result), "",
    ]
    if result.skipped:
        parts += ["## Skipped", "", *(f"- {run}: {reason}" for run, reason in result.skipped), ""]
    return "\n".join(parts)


def write_result(result: SuiteResult, out: Path, folder: str, overrides: Sequence[str]) -> list[Path]:
    """DIR/suite.csv and DIR/suite.md, each written atomically."""
    table = result.table.copy()
    for col in table.columns[table.columns.get_loc("measured"):]:
        table[col] = table[col].astype(float).round(4)
    return [
        outputs.write_csv(out / "suite.csv", table),
        outputs.write_text(out / "suite.md", render_markdown(result, folder, overrides)),
    ]


def parse_args(argv: Sequence[str] | None, prog: str = "python -m distsim.calibrate validate") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a folder with experiments.csv, workload_profiles.json, traces/, measured.csv")
    p.add_argument("overrides", nargs="*", help="config overrides on top of each run's settings (key=value)")
    p.add_argument("--out", required=True, help="output folder for suite.csv and suite.md")
    p.add_argument("--runs", default=None, help="comma-separated run ids to replay (default: all)")
    return p.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None, prog: str = "python -m distsim.calibrate validate") -> int:
    args = parse_args(argv, prog)
    try:
        out = outputs.prepare_dir(args.out)
        suite = read_suite(args.folder)
        result = replay_suite(suite, args.overrides, parse_ids(args.runs), progress=lambda line: print(line, file=sys.stderr))
        write_result(result, out, args.folder, args.overrides)
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    print(medians_markdown(result))
    for run, reason in result.skipped:
        print(f"skipped {run}: {reason}")
    return 0

