"""The ``steps`` stage: distsim's step-time model against measured engine steps, and the GPU-term fit.

    python -m distsim.calibrate steps ../shared/data/h100_steps [cluster.latency.KEY=VALUE ...] [--fit [--lomo]] [--out DIR]

Every step of the folder's primary tables (:mod:`distsim.fidelity.steps.data`) is timed by the latency
model that the config (defaults plus the overrides) builds for the GPU the table was measured on (its
``gpu`` column, else the folder README's GPU), the table's TP shapes and model
(:mod:`distsim.fidelity.steps.compare`); error % = (simulated - measured) / measured x 100 of one GPU's
kernel time, per model and step class (decode, long context, prefill, mixed). Why at the step level: a
whole run's error mixes the step model with the scheduler and the engine's host work; these steps
isolate the first.

``--fit`` fits every GPU coefficient of the per-operator model (``kind=roofline3``, the default) to every
table by bounded linear least squares (:mod:`distsim.fidelity.steps.nnls`); ``--lomo`` adds
leave-one-model-out. A folder with a profile's all-reduce table (``micro_all_reduce.csv``) has NCCL's
all-reduce terms fitted on it too (:mod:`distsim.fidelity.collectives`), its warnings printed. Writes
DIR/steps.csv (one row per step, at the fitted values when fitting), DIR/steps.md (the tables) and, when
fitting, DIR/step_fit.json (``calibrate runs --steps`` reads its ``values``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from distsim import outputs
from distsim.errors import UserError
from distsim.fidelity.steps.compare import compare, latency_settings, simulate, summary, summary_markdown
from distsim.fidelity.steps.data import StepTable, read_steps


@dataclass
class StepReport:
    tables: list[StepTable]
    steps: pd.DataFrame  # at the configured values
    fitted_steps: pd.DataFrame | None = None  # at the fitted values
    basis_fit: Any = None  # nnls.BasisFit (--fit)
    lomo: Any = None  # nnls.Lomo (--lomo)
    collectives: Any = None  # collectives.ProfileCollectivesFit (--fit on a folder with micro_all_reduce.csv)

    @property
    def final(self) -> pd.DataFrame:
        return self.steps if self.fitted_steps is None else self.fitted_steps


def run_steps(folder: str | Path, overrides: Sequence[str] = ()) -> StepReport:
    """Compare every step at the configured values."""
    tables = read_steps(folder)
    return StepReport(tables, compare(tables, simulate(tables, latency_settings(overrides))))


def run_nnls(folder: str | Path, overrides: Sequence[str] = (), with_lomo: bool = False) -> StepReport:
    """Compare at the configured values, fit every GPU coefficient by bounded least squares (and leave
    each model out with ``with_lomo``)."""
    from distsim.fidelity.steps import nnls
    from distsim.instance.latency.roofline3 import coefficients_from

    settings = latency_settings(overrides)
    if settings.node.get("kind") != "roofline3":
        raise UserError("--fit fits the per-operator step model: cluster.latency.kind=roofline3 (the default)")
    tables = read_steps(folder)
    start = coefficients_from(settings.node)
    report = StepReport(tables, compare(tables, simulate(tables, settings)))
    report.basis_fit = nnls.fit_basis(tables, settings, start)
    report.fitted_steps = compare(tables, simulate(tables, settings, nnls.values_of(report.basis_fit.coefficients)))
    if with_lomo:
        report.lomo = nnls.lomo(tables, settings, start)
    report.collectives = collectives_fit(folder, tables)
    return report


def collectives_fit(folder: str | Path, tables: Sequence[StepTable]) -> Any:
    """The all-reduce terms fitted on the folder's ``micro_all_reduce.csv`` (a profile's), on the GPU its
    last table was measured on; None without one."""
    from distsim.fidelity.collectives import fit_folder

    last = tables[-1]
    return fit_folder(Path(folder).expanduser(), last.gpu(), last.device is None)


def fitted_values(report: StepReport) -> dict[str, float]:
    """The fit's ``cluster.latency`` values: the GPU coefficients, and the all-reduce's where fitted."""
    from distsim.fidelity.steps.nnls import values_of

    values = values_of(report.basis_fit.coefficients)
    if report.collectives is not None and report.collectives.applies:
        values.update(report.collectives.fit.values)
    return values


def nnls_markdown(report: StepReport) -> str:
    from distsim.fidelity.steps.nnls import values_of

    fit = report.basis_fit
    lines = ["| coefficient | fitted |", "|---|---:|"]
    lines += [f"| {k} | {v:.6g} |" for k, v in values_of(fit.coefficients).items()]
    text = "\n".join(lines)
    rms = (fit.objective**0.5) * 100
    text += (
        f"\n\nFitted by bounded linear least squares on {', '.join(fit.tables)} (each model and, within it, "
        f"each step class weighted equally), {fit.iterations} passes until no max changed side. Objective "
        f"(weighted mean squared relative error): {fit.start_objective:.5f} at the start, {fit.objective:.5f} "
        f"fitted (typical error {rms:.1f}%)."
    )
    if fit.unused:
        text += f"\n\nNot moved by any row (kept at their start): {', '.join(fit.unused)}."
    if report.collectives is not None:
        text += "\n\n" + collectives_markdown(report.collectives)
    return text


def collectives_markdown(c: Any) -> str:
    """The all-reduce fit's section of steps.md."""
    err = c.fit.error
    lines = [f"All-reduce ({c.path}, micro_all_reduce.csv: {c.sizes} message sizes, group sizes "
             f"{', '.join(map(str, c.group_sizes)) or 'none'}):", "", "| term | fitted |", "|---|---:|"]
    lines += [f"| {k} | {v:.6g} |" for k, v in c.fit.values.items()]
    if err:
        lines += ["", f"Error over {err['points']} points: mean {err['mean_abs_pct']}%, largest {err['max_abs_pct']}%."]
    lines += ["", *[f"- warning: {w}" for w in c.warnings]]
    return "\n".join(lines)


def render_markdown(report: StepReport, folder: str, overrides: Sequence[str]) -> str:
    """steps.md: the inputs, notes, the error table at the configured values and, fitting, at the fit."""
    parts = [
        f"# Step times of {folder} against distsim's gpu_step_us",
        "",
        f"Overrides: {' '.join(overrides) or '(none)'}. Error = (simulated - measured) / measured, "
        "one GPU's kernel time of a step (the GPU and TP shapes each table was measured on, no "
        "collectives); positive = distsim slower.",
        "",
    ]
    parts += [f"- {t.name}: {t.note}" for t in report.tables if t.note]
    parts += ["", "## At the configured values", "", summary_markdown(summary(report.steps)), ""]
    if report.basis_fit is not None and report.fitted_steps is not None:
        parts += [
            "## Fit (bounded linear least squares, every table)", "", nnls_markdown(report), "",
            "## At the fitted values", "", summary_markdown(summary(report.fitted_steps)), "",
        ]
        if report.lomo is not None:
            parts += [
                "## Leave one model out",
                "",
                "Each model's steps at the values fitted on the other models' tables.",
                "",
                summary_markdown(summary(report.lomo.steps)),
                "",
            ]
    return "\n".join(parts)


def write_report(
    report: StepReport, out: Path, folder: str, overrides: Sequence[str], command: str
) -> list[Path]:
    """DIR/steps.csv, DIR/steps.md and, when fitting, DIR/step_fit.json, each written atomically."""
    table = report.final.copy()
    for col in ("measured_us", "simulated_us", "error_pct"):
        table[col] = table[col].round(3)
    paths = [
        outputs.write_csv(out / "steps.csv", table),
        outputs.write_text(out / "steps.md", render_markdown(report, folder, overrides)),
    ]
    if report.basis_fit is not None:
        paths.append(outputs.write_text(out / "step_fit.json", nnls_json(report, command)))
    if report.lomo is not None:
        lomo = report.lomo.steps.copy()
        for col in ("measured_us", "simulated_us", "error_pct"):
            lomo[col] = lomo[col].round(3)
        paths.append(outputs.write_csv(out / "steps_lomo.csv", lomo))
    return paths


def nnls_json(report: StepReport, command: str) -> str:
    from distsim.fidelity.steps.nnls import values_of

    fit = report.basis_fit
    body = {
        "command": command,
        "values": fitted_values(report),
        "linear": fit.linear,
        "start_linear": fit.start,
        "unused": fit.unused,
        "objective": fit.objective,
        "start_objective": fit.start_objective,
        "iterations": fit.iterations,
        "fitted_on": fit.tables,
    }
    if report.lomo is not None:
        body["lomo"] = {g: values_of(f.coefficients) for g, f in report.lomo.fits.items()}
    if report.collectives is not None:
        body["all_reduce"] = report.collectives.as_json()
        body["warnings"] = report.collectives.warnings
    return json.dumps(body, indent=2, allow_nan=False) + "\n"


def parse_args(argv: Sequence[str] | None, prog: str = "python -m distsim.calibrate steps") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a folder of step tables laid out like ../shared/data/h100_steps")
    p.add_argument(
        "overrides", nargs="*", help="config overrides, e.g. cluster.latency.compute_efficiency=0.6"
    )
    p.add_argument("--out", default=None, help="output folder for steps.csv, steps.md (and step_fit.json)")
    p.add_argument("--fit", action="store_true", help="fit every GPU coefficient of kind=roofline3 by bounded least squares")
    p.add_argument("--lomo", action="store_true", help="with --fit: leave each model out in turn")
    return p.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None, prog: str = "python -m distsim.calibrate steps") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, prog)
    command = prog + " " + " ".join(shlex.quote(a) for a in argv)
    try:
        if args.lomo and not args.fit:
            raise UserError("--lomo goes with --fit")
        out = None if args.out is None else outputs.prepare_dir(args.out)
        report = run_nnls(args.folder, args.overrides, args.lomo) if args.fit else run_steps(args.folder, args.overrides)
        if out is not None:
            write_report(report, out, args.folder, args.overrides, command)
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    print(render_markdown(report, args.folder, args.overrides))
    for line in report.collectives.warnings if report.collectives is not None else ():
        print(f"warning: {line}", file=sys.stderr)
    return 0
