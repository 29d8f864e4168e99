"""The ``report`` stage: a serving fit (``calibrate runs``'s JSON) as a Markdown page.

The page holds what a reader checks a fit by: the values it moved (start and fitted), every run's
whole-run error of mean E2E, TTFT and ITL at the start, fitted and (when the fit left each model out)
held out, the medians of their absolute values, and the load slopes of runs measured at two rates.
With ``--steps``, the GPU coefficients of the step fit the runs were fitted under; with ``--residuals``
(a fit on a folder of runs), each run's simulated mean ITL and TTFT at the fitted values split into the
model's parts beside the measured ones (:mod:`distsim.fidelity.residuals`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from distsim.errors import UserError

METRICS = ("e2e_mean", "ttft_mean", "itl_mean")
LABELS = {"e2e_mean": "mean E2E", "ttft_mean": "mean TTFT", "itl_mean": "mean ITL"}


def _read(path: Path, what: str, keys: tuple[str, ...]) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read {what} ({err})") from None
    missing = [k for k in keys if not isinstance(data, dict) or k not in data]
    if missing:
        raise UserError(f"{path}: not {what} (no {missing[0]!r})")
    return data


def _check_parts(path: Path, data: dict, what: str) -> None:
    """The start's and the fit's values, runs and medians, each a mapping: a fit file cut short or
    edited is one line naming what it lacks, not a KeyError."""
    for part in ("start", "fit"):
        for key in ("values", "runs", "medians"):
            if not isinstance(data[part], dict) or not isinstance(data[part].get(key), dict):
                raise UserError(f"{path}: not {what} (no '{part}.{key}')")


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.1f}%"


def _values(data: dict) -> list[str]:
    start, fit = data["start"]["values"], data["fit"]["values"]
    lines = ["| term | start | fitted |", "|---|---:|---:|"]
    return lines + [f"| `{k}` | {start.get(k, math.nan):.6g} | {v:.6g} |" for k, v in fit.items()]


def _runs(data: dict) -> list[str]:
    columns = [("start", data["start"]["runs"]), ("fitted", data["fit"]["runs"])]
    if "lomo" in data:
        columns.append(("held out", data["lomo"]["runs"]))
    head = " | ".join(f"{LABELS[m]} {name}" for name, _ in columns for m in METRICS)
    lines = [f"| run | {head} |", "|---|" + "---:|" * (len(columns) * len(METRICS))]
    for run in data["fit"]["runs"]:
        cells = " | ".join(_pct(col.get(run, {}).get(m)) for _, col in columns for m in METRICS)
        lines.append(f"| {run} | {cells} |")
    return lines


def _medians(data: dict) -> list[str]:
    rows = [("start", data["start"]), ("fitted", data["fit"])] + ([("held out", data["lomo"])] if "lomo" in data else [])
    lines = ["| | " + " | ".join(LABELS[m] for m in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    return lines + [
        f"| {name} | " + " | ".join(f"{part['medians'].get(m, math.nan):.1f}%" for m in METRICS) + " |"
        for name, part in rows
    ]


def _slopes(data: dict) -> list[str]:
    slopes = data.get("slopes") or []
    if not slopes:
        return []
    lines = ["| run | metric | rates (req/s) | measured (ms per req/s) | simulated | error |", "|---|---|---|---:|---:|---:|"]
    lines += [
        f"| {s['run']} | {s['metric']} | {s['rate0']:g} -> {s['rate1']:g} | {s['measured']:.3g} | {s['simulated']:.3g} | {_pct(s['error_pct'])} |"
        for s in slopes
    ]
    within = sum(1 for s in slopes if math.isfinite(s["error_pct"]) and abs(s["error_pct"]) <= 20)
    return ["## Load slopes", "", *lines, "", f"Within 20%: {within} of {len(slopes)}.", ""]


def residual_section(data: dict) -> list[str]:
    """Each fitted run's residuals at the fitted values (a fit on a folder of runs only)."""
    from distsim.calibrate.runs import is_suite
    from distsim.fidelity.residuals import decompose, markdown

    folders = data.get("data") or []
    if len(folders) != 1 or not is_suite(folders[0]):
        raise UserError("--residuals needs a fit on a folder of runs (one with experiments.csv)")
    table = decompose(folders[0], [*data.get("overrides", []), *data.get("use", [])], list(data["fit"]["runs"]))
    return [
        "## Where each run's error sits (ms, at the fitted values)", "",
        "Residual = measured - simulated; the simulated mean ITL split by each part's share of the busy time, "
        "the simulated mean TTFT into the front end and the engine.", "", markdown(table), "",
    ]


def render(fit_path: Path, steps_path: Path | None = None, residuals: bool = False) -> str:
    """The Markdown page of the fit at ``fit_path`` (and the step fit at ``steps_path``; the residuals of
    every run when ``residuals``)."""
    what = "a serving fit (calibrate runs)"
    data = _read(fit_path, what, ("start", "fit", "command"))
    _check_parts(fit_path, data, what)
    split = residual_section(data) if residuals else []
    parts = [
        f"# Calibration: {fit_path.name}",
        "",
        f"`{data['command']}`",
        "",
        "Error = (simulated - measured) / measured of each run's whole-run figure; positive = simulator slower.",
        "",
        "## Serving terms (the GPU terms frozen)",
        "",
        *_values(data),
        "",
        f"Simulate with: `{' '.join(data.get('use', []))}`" if data.get("use") else "",
        "",
        "## Median absolute error over the runs",
        "",
        *_medians(data),
        "",
        "## Per run",
        "",
        *_runs(data),
        "",
        *_slopes(data),
    ]
    parts += split
    if data.get("skipped"):
        parts += ["## Skipped", "", *(f"- {run}: {why}" for run, why in data["skipped"]), ""]
    if steps_path is not None:
        steps = _read(steps_path, "a step fit (step_fit.json)", ("values",))
        parts += ["## GPU terms (step fit)", "", f"`{steps.get('command', '')}`", "", "| coefficient | fitted |", "|---|---:|"]
        parts += [f"| `{k}` | {v:.6g} |" for k, v in steps["values"].items()] + [""]
    return "\n".join(parts)
