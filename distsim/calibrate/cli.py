"""``python -m distsim.calibrate steps|runs|residuals|validate|report``: the calibration pipeline's one command.

Each subcommand is one stage (see :mod:`distsim.calibrate`); ``python -m distsim.calibrate SUBCOMMAND -h``
lists its options. A user's mistake is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from distsim import outputs
from distsim.errors import UserError

PROG = "python -m distsim.calibrate"
STAGES = ("steps", "runs", "residuals", "validate", "report")
DEFAULT_FIT = "calibration.json"


def _runs_parser() -> argparse.ArgumentParser:
    from distsim.fidelity import runfit

    p = argparse.ArgumentParser(
        prog=f"{PROG} runs",
        description="Fit the serving terms (host, front end) on real runs with the GPU terms frozen.",
    )
    p.add_argument("paths", nargs="*", help="run folders or CSV runs, or one folder of runs (with experiments.csv); "
                   "and config overrides (key=value) for every replay")
    p.add_argument("--steps", metavar="STEP_FIT", help="GPU terms from a step fit (step_fit.json) or a folder of step tables to fit")
    p.add_argument("--terms", metavar="KEY,KEY", help=f"comma-separated keys to fit (default: all of {', '.join(runfit.TERMS)})")
    p.add_argument("--runs", metavar="ID,ID", help="comma-separated run ids of a folder of runs (default: all that have measurements)")
    p.add_argument("--lomo", action="store_true", help="also leave each model out in turn")
    p.add_argument("--iterations", type=int, default=3, help="Gauss-Newton iterations (default 3)")
    p.add_argument("--workers", type=int, default=None, help="replay processes (default: os.cpu_count())")
    p.add_argument("--out", default=DEFAULT_FIT, help=f"the fit as JSON (default {DEFAULT_FIT})")
    return p


def _terms(text: str | None) -> list[str] | None:
    from distsim.fidelity import runfit

    if text is None:
        return None
    terms = [t.strip() for t in text.split(",") if t.strip()]
    unknown = sorted(set(terms) - set(runfit.TERMS))
    if unknown or not terms:
        named = ", ".join(unknown) if unknown else repr(text)
        raise UserError(f"--terms: not a fitted term: {named} (one of {', '.join(runfit.TERMS)})")
    return terms


def runs_main(argv: Sequence[str]) -> int:
    from distsim.calibrate import runs as stage
    from distsim.fidelity import runfit
    from distsim.fidelity.pool import ReplayPool

    parser = _runs_parser()
    ns = parser.parse_intermixed_args(argv)
    overrides = [a for a in ns.paths if "=" in a]
    paths = [a for a in ns.paths if "=" not in a]
    if not paths:
        parser.error("give at least one run, or a folder of runs")
    if ns.iterations < 1 or (ns.workers is not None and ns.workers < 1):
        parser.error("--iterations and --workers must be at least 1")
    command = f"{PROG} runs " + shlex.join(list(argv))

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        terms = _terms(ns.terms)
        out = outputs.prepare_file(ns.out)
        gpu = stage.gpu_overrides(ns.steps, overrides)
        frozen = [*gpu, *overrides]  # the user's own values win
        with ReplayPool(frozen, workers=ns.workers or os.cpu_count() or 1) as pool:
            runs, _ = stage.load_runs(paths, pool, ns.runs)
            if ns.lomo:
                stage.check_lomo(runs)
            start = runfit.start_values(frozen)
            result = runfit.fit(runs, start, ns.iterations, ns.lomo, say, terms)
        record = stage.fit_record(result, runs, frozen, command, gpu, paths)
        outputs.write_text(out, json.dumps(record, indent=2, allow_nan=True) + "\n")
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    medians = record["fit"]["medians"]
    print(", ".join(f"{k}={v:.6g}" for k, v in result.best.values.items()))
    print(f"objective {result.best.objective:.5f} (start {result.start.objective:.5f}) after {result.evaluations} replays of every run")
    print("median |error|: " + ", ".join(f"{m} {v:.1f}%" for m, v in medians.items()))
    for run_id, reason in runs.skipped:
        print(f"skipped {run_id}: {reason}")
    print(f"wrote {out}; simulate with: " + " ".join(record["use"]))
    return 0


def _with_fit(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--fit FIT.json`` replaced by the fit's overrides, placed before the user's own
    overrides (so those win)."""
    from distsim.calibrate.runs import fit_overrides

    argv = list(argv)
    if "--fit" not in argv:
        return argv
    at = argv.index("--fit")
    if at + 1 >= len(argv):
        raise UserError("--fit needs a fit file (calibrate runs --out)")
    use = fit_overrides(argv[at + 1])
    del argv[at : at + 2]
    first = next((i for i, a in enumerate(argv) if not a.startswith("-") and "=" not in a), -1)
    return argv[: first + 1] + use + argv[first + 1 :]


def validate_main(argv: Sequence[str]) -> int:
    """A folder of runs: suite.csv and suite.md; a run: validation.json and its plots (distsim.validate).
    ``--fit FIT.json`` validates at a fit's values."""
    from distsim.calibrate.runs import is_suite

    try:
        argv = _with_fit(argv)
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    first = next((a for a in argv if not a.startswith("-") and "=" not in a), None)
    if first is not None and is_suite(first):
        from distsim.fidelity.suite import replay as suite

        return suite.main(list(argv), prog=f"{PROG} validate")
    from distsim import validate

    return validate.main(list(argv), prog=f"{PROG} validate")


def report_main(argv: Sequence[str]) -> int:
    from distsim.calibrate.report import render

    p = argparse.ArgumentParser(prog=f"{PROG} report", description="A fit (calibrate runs) as Markdown.")
    p.add_argument("fit", help=f"the JSON that '{PROG} runs' wrote")
    p.add_argument("--steps", help=f"a step fit (step_fit.json, '{PROG} steps --fit') to list beside it")
    p.add_argument("--residuals", action="store_true",
                   help="also split each run's simulated ITL and TTFT into the model's parts (one replay of every run)")
    p.add_argument("--out", help="write the page here (default: print it)")
    ns = p.parse_args(argv)
    try:
        out = outputs.prepare_file(ns.out) if ns.out else None  # a bad --out fails before the replays
        page = render(Path(ns.fit), Path(ns.steps) if ns.steps else None, ns.residuals)
        if out is not None:
            outputs.write_text(out, page)
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    print(page if not ns.out else f"wrote {ns.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in STAGES:
        if argv and argv[0] in ("-h", "--help"):
            print(sys.modules["distsim.calibrate"].__doc__ or "")
            return 0
        got = f"got {argv[0]!r}" if argv else "got none"
        print(f"distsim.calibrate: give a stage first: {PROG} {{{','.join(STAGES)}}} ... ({got})", file=sys.stderr)
        return 2
    stage, rest = argv[0], argv[1:]
    if stage == "steps":
        from distsim.fidelity.steps import cli as steps

        return steps.main(rest, prog=f"{PROG} steps")
    if stage == "residuals":
        from distsim.fidelity import residuals

        return residuals.main(rest)
    return {"runs": runs_main, "validate": validate_main, "report": report_main}[stage](rest)
