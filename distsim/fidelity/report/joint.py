"""docs/fidelity.md's joint-refit tables (issue 24, written by scripts/fidelity_h100.py): roofline3's GPU
terms refitted on the real runs within the step tables' 2-point budget (docs/data/h100_jointfit.json,
which ``python -m distsim.fidelity.jointfit`` writes): the values against the step-only fit, every step
table in sample and held out against its limit, the runs in sample and held out, the load slopes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from distsim.fidelity.report.model import _pct, _signed

JOINTFIT = Path("docs") / "data" / "h100_jointfit.json"


def _values(data: dict) -> list[str]:
    start, fit = data["start"]["values"], data["fit"]["values"]
    lines = ["| term | step-only fit, host frozen fit (start) | joint refit |", "|---|---:|---:|"]
    lines += [f"| `{k}` | {start.get(k, float('nan')):.4g} | {v:.4g} |" for k, v in fit.items()]
    return lines


def _steps(data: dict) -> list[str]:
    held = {t: e for group in data.get("step_lomo", {}).values() for t, e in group.items()}
    lines = ["| table | step-only fit | limit | joint refit | joint refit, its model left out |", "|---|---:|---:|---:|---:|"]
    for name, s in data["steps"].items():
        lines.append(f"| {name} | {_pct(s['start'])} | {_pct(s['limit'])} | {_pct(s['fit'])} | {_pct(held.get(name, float('nan')))} |")
    return lines


def _runs(data: dict) -> list[str]:
    start, fit, lomo = data["start"]["runs"], data["fit"]["runs"], data.get("lomo", {}).get("runs", {})
    cell = lambda d: " / ".join(_signed(d.get(m, float("nan"))) for m in ("e2e_mean", "ttft_mean", "itl_mean"))  # noqa: E731
    lines = ["| run | start (host fit, GPU frozen) | joint refit | joint refit, model left out |", "|---|---|---|---|"]
    lines += [f"| {run} | {cell(start.get(run, {}))} | {cell(fit[run])} | {cell(lomo.get(run, {}))} |" for run in fit]
    return lines


def _slopes(data: dict) -> tuple[list[str], str]:
    new, old = pd.DataFrame(data.get("slopes", [])), pd.DataFrame(data.get("start_slopes", []))
    lines = ["| run | figure | measured (ms per req/s) | start | joint refit |", "|---|---|---:|---:|---:|"]
    for r in new.itertuples():
        o = old[(old["run"] == r.run) & (old["metric"] == r.metric)]
        before = f"{o.iloc[0]['simulated']:.3f} ({o.iloc[0]['error_pct']:+.0f}%)" if len(o) else "n/a"
        lines.append(f"| {r.run} | {r.metric.split('_')[0].upper()} | {r.measured:.3f} | {before} | {r.simulated:.3f} ({r.error_pct:+.0f}%) |")
    within = lambda s: int((s["error_pct"].abs() <= 20).sum()) if len(s) else 0  # noqa: E731
    return lines, f"Within 20% of the real slope: start {within(old)} of {len(old)}, joint refit {within(new)} of {len(new)}."


def joint_section(root: Path, shipped: dict, shipped_lomo: dict | None) -> str:
    """The joint refit's tables; ``shipped``/``shipped_lomo``: the previous default's (roofline) run medians."""
    data = json.loads((root / JOINTFIT).read_text(encoding="utf-8"))
    medians = ["| model, values | mean E2E | mean TTFT | mean ITL |", "|---|---:|---:|---:|"]
    rows = [("roofline (previous default), in sample", shipped),
            ("roofline (previous default), leave-one-model-out", shipped_lomo or {}),
            ("roofline3, host fit with GPU frozen (start), in sample", data["start"]["medians"]),
            ("roofline3, joint refit, in sample", data["fit"]["medians"]),
            ("roofline3, joint refit, leave-one-model-out", data.get("lomo", {}).get("medians", {}))]
    medians += [f"| {label} | {_pct(d['e2e_mean'])} | {_pct(d['ttft_mean'])} | {_pct(d['itl_mean'])} |" for label, d in rows if d]
    slope_lines, slope_note = _slopes(data)
    return "\n".join([
        f"`{data['command']}` ({data['evaluations']} replays of every run, {data['seconds'] / 60:.0f} min). "
        "The GPU terms the runs move, refitted with the host and front-end terms and the collectives' latency "
        "(which the kernels-only step tables cannot see), every step table's mean absolute error held at most "
        "2 points above the step-only fit; leave-one-model-out drops a model's runs and its step tables' limits "
        "(runs) or a step model group with the runs of the same model (steps).",
        "", *_values(data), "", "Step tables (mean absolute error):", "", *_steps(data), "",
        "Median absolute error over the 13 runs:", "", *medians, "",
        "Whole-run error of mean E2E / mean TTFT / mean ITL per run (positive: the simulator slower):", "",
        *_runs(data), "", f"Load slope of the two-rate runs. {slope_note}", "", *slope_lines,
    ])
