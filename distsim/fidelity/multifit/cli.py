"""``python -m distsim.calibrate --suite FOLDER ...``: the command line of the multi-run fit.

It lives in :mod:`distsim.calibrate` so that fitting is one command: run folders (per-request data)
fit a latency profile; ``--suite`` fits one coefficient set over every run of a suite folder
(:mod:`distsim.fidelity.multifit.fit`), optionally with leave-one-model-out cross-validation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from distsim import outputs
from distsim.errors import UserError
from distsim.fidelity.multifit.fit import Evaluation, SuiteEvaluator, fit_runs, fit_suite
from distsim.fidelity.multifit.lomo import Fold, leave_one_model_out
from distsim.fidelity.multifit.pool import ReplayPool
from distsim.fidelity.multifit.report import (
    REPORT_METRICS,
    FitContext,
    fit_json,
    fit_markdown,
    folds_json,
    folds_markdown,
)
from distsim.fidelity.multifit.space import DEFAULT_PARAMS, parse_params, start_values
from distsim.fidelity.suite.data import parse_ids, read_suite
from distsim.fidelity.suite.replay import medians, medians_table

SUITE_BUDGET = 100  # evaluations; each replays every run (about 7 s for the 13 H100 runs on 2 cores)
DEFAULT_OUT = "multifit.json"
SUITE_ONLY = ("runs", "params", "workers", "leave_one_model_out", "fold_budget")


def count(what: str) -> Callable[[str], int]:
    """An argparse type: a whole number of ``what``, at least one."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number of {what} (got {text!r})") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("one coefficient set over a suite folder (distsim.fidelity.multifit)")
    g.add_argument(
        "--suite",
        metavar="FOLDER",
        help="fit over every run of a folder laid out like ../shared/data/h100_vllm_runs",
    )
    g.add_argument("--runs", help="comma-separated run ids to fit on (default: all that have measurements)")
    g.add_argument(
        "--params",
        action="append",
        default=[],
        metavar="KEY=LOW:HIGH[:log],...",
        help="config keys to fit and their boxes (default: " + ",".join(DEFAULT_PARAMS) + ")",
    )
    g.add_argument("--workers", type=count("processes"), help="replay processes (default: os.cpu_count())")
    g.add_argument(
        "--leave-one-model-out",
        action="store_true",
        help="also fit once per model on the other models' runs and report the held-out errors",
    )
    g.add_argument(
        "--fold-budget", type=count("evaluations"), help="evaluations per fold (default: --budget)"
    )


def check(parser: argparse.ArgumentParser, ns: argparse.Namespace, paths: Sequence[str]) -> None:
    """Refuse options that belong to the other mode (argparse's usage line and exit 2)."""
    if ns.suite is None:
        given = [o for o in SUITE_ONLY if getattr(ns, o) not in (None, False, [])]
        if given:
            parser.error(f"--{given[0].replace('_', '-')} needs --suite FOLDER")
        return
    if paths:
        parser.error(f"--suite takes no run folders (got {paths[0]}); arguments with '=' are overrides")
    if ns.model is not None or ns.name is not None:
        parser.error("--model and --name are for run folders; --suite fits the roofline's config keys")


def _print_summary(ev_start: Evaluation, ev_best: Evaluation, evaluations: int, seconds: float) -> None:
    print(", ".join(f"{k}={v:.6g}" for k, v in ev_best.values.items()))
    print(
        f"objective {ev_best.objective:.4f} (start {ev_start.objective:.4f}) after {evaluations} evaluations, "
        f"{seconds:.1f} s each on average"
    )
    print(medians_table(medians(ev_best.result, REPORT_METRICS), REPORT_METRICS))


def _write(out: Path, record: dict, page: str) -> Path:
    """The JSON record at ``out``, the Markdown page beside it (returned)."""
    outputs.write_text(out, json.dumps(record, indent=2) + "\n")
    return outputs.write_text(out.with_suffix(".md"), page)


def run(ns: argparse.Namespace, overrides: list[str], command: str) -> int:
    """The ``--suite`` mode of distsim.calibrate; 0, or 2 after one line on a user error."""

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    out = Path(ns.out or DEFAULT_OUT)
    budget = ns.budget or SUITE_BUDGET
    workers = ns.workers or os.cpu_count() or 1
    try:
        if out.suffix == ".md":
            raise UserError(f"--out {out}: give the JSON file; the Markdown page goes beside it as .md")
        outputs.prepare_file(out)
        params = parse_params(ns.params)
        suite = read_suite(ns.suite)
        runs, skipped = fit_runs(suite, parse_ids(ns.runs))
        start = start_values(params, overrides)
        ctx = FitContext(ns.suite, runs, skipped, overrides, workers, command)
        with ReplayPool(overrides, workers) as pool:
            progress(f"fitting {len(params)} values on {len(runs)} runs, budget {budget}, {workers} workers")
            fit = fit_suite(SuiteEvaluator(suite, runs, pool), params, start, budget, progress=progress)
            record, page = fit_json(fit, ctx), fit_markdown(fit, ctx)
            md = _write(out, record, page)  # the fit is kept if the folds are stopped
            if ns.leave_one_model_out:
                progress(f"wrote {out}; the folds follow")
                fold_budget = ns.fold_budget or budget

                def write_folds(folds: list[Fold]) -> None:
                    record["leave_one_model_out"] = folds_json(folds, fit, fold_budget)
                    _write(out, record, page + "\n" + folds_markdown(folds, fit, fold_budget))

                leave_one_model_out(suite, runs, pool, params, start, fold_budget, progress, write_folds)
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    _print_summary(fit.start, fit.best, fit.evaluations, sum(fit.eval_seconds) / len(fit.eval_seconds))
    print(f"wrote {out} and {md}")
    return 0
