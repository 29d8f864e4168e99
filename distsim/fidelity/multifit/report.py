"""What a multi-run fit writes: a JSON record (values, objective, per-run errors, provenance) and a
Markdown page with the suite's tables (per-run whole-run errors, medians beside the peers' recorded
``mpe`` on the same runs), plus the leave-one-model-out table when folds were run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from distsim import __version__
from distsim.fidelity.multifit.fit import RUN_CAP, WEIGHTS, Evaluation, SuiteFit
from distsim.fidelity.multifit.lomo import Fold
from distsim.fidelity.suite.data import SuiteRun
from distsim.fidelity.suite.replay import SuiteResult, medians, medians_table, runs_markdown

REPORT_METRICS = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p99", "ttft_p99")
OBJECTIVE = (
    "per run: weighted mean of |relative error| of whole-run e2e_mean, ttft_mean, itl_mean (weight 2) and "
    f"e2e_p90, e2e_p99, ttft_p90, ttft_p99 (weight 1), capped at {RUN_CAP:g}; averaged over each model's "
    "runs, then over models"
)
OPTIMIZER = "cma-es (cmaes, seed 0) then Nelder-Mead polish (scipy); distsim.fidelity.optimize"


@dataclass
class FitContext:
    """What the fit ran on and how it was asked for."""

    folder: str
    runs: list[SuiteRun]
    skipped: list[tuple[str, str]]  # (run id, reason)
    overrides: list[str]
    workers: int
    command: str


def _round(values: dict[str, float]) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in values.items()}


def run_errors(ev: Evaluation) -> dict[str, dict]:
    """Per run: model, capped term, whole-run errors in % (None where not computable)."""

    def pct(x: float) -> float | None:
        return round(100.0 * x, 3) if np.isfinite(x) else None

    return {
        r.run_id: {
            "model": r.model,
            "term": round(r.term, 6),
            "errors_pct": {m: pct(e) for m, e in r.errors.items()},
        }
        for r in ev.runs
    }


def timing(fit: SuiteFit) -> dict[str, float]:
    """Wall time per evaluation, and the replays' summed time (one core's worth) per evaluation."""
    s = np.asarray(fit.eval_seconds, dtype=float)
    return {
        "evaluations": int(s.size),
        "mean_s": round(float(s.mean()), 3),
        "min_s": round(float(s.min()), 3),
        "max_s": round(float(s.max()), 3),
        "total_s": round(float(s.sum()), 3),
        "replays_mean_s": round(float(np.mean(fit.replay_seconds)), 3),
    }


def fit_json(fit: SuiteFit, ctx: FitContext) -> dict:
    """The fit's record: values, objective at start and at the fit, per-run errors, provenance."""
    return {
        "suite": ctx.folder,
        "runs": [
            {"id": r.id, "model": r.model_name, "tp": r.tp, "workload": r.workload.name} for r in ctx.runs
        ],
        "skipped": [{"id": i, "reason": why} for i, why in ctx.skipped],
        "overrides": list(ctx.overrides),
        "params": [{"key": p.name, "low": p.low, "high": p.high, "log": p.log} for p in fit.params],
        "start": _round(fit.start.values),
        "fitted": _round(fit.best.values),
        "objective": {
            "start": round(fit.start.objective, 6),
            "fit": round(fit.best.objective, 6),
            "definition": OBJECTIVE,
            "weights": WEIGHTS,
            "run_cap": RUN_CAP,
        },
        "optimizer": OPTIMIZER,
        "budget": fit.budget,
        "workers": ctx.workers,
        "timing": timing(fit),
        "errors_at_start": run_errors(fit.start),
        "errors_at_fit": run_errors(fit.best),
        "command": ctx.command,
        "distsim_version": __version__,
    }


def folds_json(folds: Sequence[Fold], fit: SuiteFit, budget: int) -> dict:
    """The leave-one-model-out record: per fold the values, objectives and held-out errors."""
    return {
        "budget_per_fold": budget,
        "folds": [
            {
                "held_out_model": f.model,
                "train_runs": [r.run_id for r in f.fit.best.runs],
                "fitted": _round(f.fit.best.values),
                "objective_train": round(f.fit.best.objective, 6),
                "objective_held_out": round(f.held_out.objective, 6),
                "timing": timing(f.fit),
                "errors_held_out": run_errors(f.held_out),
            }
            for f in folds
        ],
        "medians_pct": {"held_out": _medians(held_out_result(folds)), "in_sample": _medians(fit.best.result)},
    }


def _medians(result: SuiteResult) -> dict[str, float]:
    row = medians(result, REPORT_METRICS).iloc[0]
    return {m: round(float(row[m]), 3) for m in REPORT_METRICS}


def held_out_result(folds: Sequence[Fold]) -> SuiteResult:
    """The held-out runs of all folds as one suite result (for the suite's tables)."""
    first = folds[0].held_out.result
    result = SuiteResult(pd.concat([f.held_out.result.table for f in folds], ignore_index=True), first.peers)
    for f in folds:
        result.notes.update(f.held_out.result.notes)
    return result


def _labelled(result: SuiteResult, label: str) -> pd.DataFrame:
    row = medians(result, REPORT_METRICS).iloc[[0]].copy()
    row["simulator"] = label
    return row


def _params_table(fit: SuiteFit) -> str:
    lines = ["| parameter | box | start | fitted |", "|---|---|---:|---:|"]
    for p in fit.params:
        box = f"{p.low:g} to {p.high:g}" + (" (log)" if p.log else "")
        lines.append(f"| {p.name} | {box} | {fit.start.values[p.name]:.6g} | {fit.best.values[p.name]:.6g} |")
    return "\n".join(lines)


def fit_markdown(fit: SuiteFit, ctx: FitContext) -> str:
    """The fit's page: command, parameters, objective, per-run errors, medians beside the peers'."""
    t = timing(fit)
    peers = medians(fit.best.result, REPORT_METRICS).iloc[1:]
    table = pd.concat(
        [_labelled(fit.best.result, "distsim (fit)"), _labelled(fit.start.result, "distsim (start)"), peers],
        ignore_index=True,
    )
    parts = [
        f"# Multi-run fit on {ctx.folder}",
        "",
        f"`{ctx.command}`",
        "",
        f"Objective ({OBJECTIVE}): {fit.start.objective:.4f} at the start, {fit.best.objective:.4f} at the fit, "
        f"after {fit.evaluations} evaluations (budget {fit.budget}); one evaluation (every run replayed) took "
        f"{t['mean_s']:.1f} s on average ({t['min_s']:.1f} to {t['max_s']:.1f} s) on {ctx.workers} workers; its "
        f"replays summed {t['replays_mean_s']:.1f} s.",
        "",
        _params_table(fit),
        "",
        "## Per run at the fit",
        "",
        "Error = (simulated - measured) / measured, whole run, positive = simulator slower.",
        "",
        runs_markdown(fit.best.result, REPORT_METRICS),
        "",
        "## Median absolute error over runs (peers: their recorded mpe on the same runs)",
        "",
        medians_table(table, REPORT_METRICS),
        "",
    ]
    if ctx.skipped:
        parts += ["## Skipped", "", *(f"- {run}: {reason}" for run, reason in ctx.skipped), ""]
    return "\n".join(parts)


def folds_markdown(folds: Sequence[Fold], fit: SuiteFit, budget: int) -> str:
    """Leave-one-model-out: per fold its values and objectives, the held-out runs' errors, and the
    held-out medians beside the in-sample ones (the fit on every model) and the peers'."""
    names = [p.name for p in fit.params]
    lines = [
        "| held-out model | runs | " + " | ".join(names) + " | objective (train) | objective (held out) |",
        "|---|---:|" + "---:|" * (len(names) + 2),
    ]
    for f in folds:
        cells = " | ".join(f"{f.fit.best.values[n]:.6g}" for n in names)
        lines.append(
            f"| {f.model} | {len(f.held_out.runs)} | {cells} | {f.fit.best.objective:.4f} "
            f"| {f.held_out.objective:.4f} |"
        )
    held = held_out_result(folds)
    table = pd.concat(
        [
            _labelled(held, "distsim, held out"),
            _labelled(fit.best.result, "distsim, in sample"),
            medians(held, REPORT_METRICS).iloc[1:],
        ],
        ignore_index=True,
    )
    return "\n".join(
        [
            "## Leave one model out",
            "",
            f"Each model's runs replayed with the values fitted on the other models' runs (budget {budget} per fold; "
            f"{len(folds)} of {len({r.model for r in fit.best.runs})} models done).",
            "",
            "\n".join(lines),
            "",
            "### Held-out runs",
            "",
            runs_markdown(held, REPORT_METRICS),
            "",
            "### Median absolute error over runs (in sample: the fit on every model)",
            "",
            medians_table(table, REPORT_METRICS),
            "",
        ]
    )
