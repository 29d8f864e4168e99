"""The per-operator step model's tables of docs/fidelity.md (written by scripts/fidelity_h100.py): the model (``cluster.latency.kind=roofline3``) on the step tables in sample and leave-one-model-out, its
coefficients with the data that pins each, GPU against host time per step class, the real runs in sample
and leave-one-model-out (from docs/data/h100_runfit.json, which ``python -m distsim.fidelity.runfit``
writes), the load slope of the two-rate runs, and the RTX runs held out. Each figure is measured here or
by the committed command named beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distsim.fidelity.steps.compare import CLASSES

ROOFLINE3 = ["cluster.latency.kind=roofline3"]
# the previous default, the roofline model,: its fitted front end (docs/data/h100_fit.json)
PREVIOUS = [
    "cluster.latency.kind=roofline", "cluster.frontend.request_us=1778", "cluster.frontend.per_input_token_us=5.48",
    "cluster.frontend.per_output_token_us=15.5",
]
RUNFIT = Path("docs") / "data" / "h100_runfit.json"
RUNFIT_COMMAND = (  # the GPU terms at the step-only fit (the shipped defaults; spelt out, as the run was)
    "python -m distsim.fidelity.runfit ../shared/data/h100_vllm_runs cluster.latency.kind=roofline3 "
    "cluster.latency.compute_efficiency=0.7531 cluster.latency.gemm_half_tokens=80.34 "
    "cluster.latency.memory_efficiency=0.7942 cluster.latency.layer_overhead_us=31.58 "
    "cluster.latency.moe_layer_overhead_us=51.70 cluster.latency.all_reduce_latency_us=10.0 --lomo "
    "--out docs/data/h100_runfit.json"
)
PINNED_BY = {
    "compute_efficiency": "dense prefills of 512-8192 tokens (compute-bound side); micro_gemm_shapes: 0.71 of the bf16 peak at M >= 512",
    "gemm_half_tokens": "prefills of 128-512 tokens and mixed steps around the crossover",
    "expert_compute_efficiency": "Mixtral, Qwen3-30B-A3B and Scout prefills (grouped GEMMs compute-bound); micro_fp8_gemm grouped rows agree (0.82 bf16)",
    "expert_half_rows": "MoE prefills of 128-2048 tokens (8-128 rows per expert) and moe_skew's touched-expert counts; micro_fp8_gemm grouped: 165-220",
    "attention_efficiency": "prefill_ctx rows (chunks after 2048-8192 cached tokens) and 4096-8192-token prefills",
    "memory_efficiency": "decodes of 1-256 sequences (weight reads) and long-context decodes (KV reads)",
    "activation_bytes_hidden": "long prefills (per-token elementwise work) across hidden sizes 2048-8192",
    "activation_bytes_intermediate": "long prefills across intermediate widths (70B TP4 0.9x hidden to Qwen2.5 5.3x)",
    "activation_bytes_routed": "MoE prefills: k routed copies per token (Qwen3 k=8, Mixtral k=2, Scout k=1)",
    "layer_overhead_us": "one-sequence decodes (latency-bound small kernels) of 8- to 80-layer models",
    "moe_layer_overhead_us": "MoE decodes of few tokens (router, top-k, sort per MoE layer)",
}


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.1f}%"


def _signed(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:+.1f}%"


def _mae(steps: pd.DataFrame) -> pd.Series:
    return steps.assign(a=steps["error_pct"].abs()).groupby("model", sort=False)["a"].mean()


def step_section(folder: Path) -> str:
    """Per table: the previous default (roofline), roofline3 fitted in sample and leave-one-model-out; the fit."""
    from distsim.fidelity.steps.cli import nnls_markdown, run_nnls, run_steps

    shipped = _mae(run_steps(folder, PREVIOUS).steps)
    report = run_nnls(folder, ROOFLINE3, with_lomo=True)
    at_defaults, fitted, lomo = _mae(report.steps), _mae(report.fitted_steps), _mae(report.lomo.steps)
    maxes = report.fitted_steps.assign(a=report.fitted_steps["error_pct"].abs()).groupby("model", sort=False)["a"].max()
    lomo_max = report.lomo.steps.assign(a=report.lomo.steps["error_pct"].abs()).groupby("model", sort=False)["a"].max()
    lines = [
        "| table | steps | roofline (previous default) | roofline3 at its defaults (the step-only fit) | roofline3 step-only fit (max) | leave-one-model-out (max) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    counts = report.steps.groupby("model", sort=False).size()
    for name in counts.index:
        lines.append(
            f"| {name} | {counts[name]} | {_pct(shipped[name])} | {_pct(at_defaults[name])} | "
            f"{_pct(fitted[name])} ({maxes[name]:.1f}%) | {_pct(lomo[name])} ({lomo_max[name]:.1f}%) |"
        )
    by_class = report.lomo.steps.assign(a=report.lomo.steps["error_pct"].abs())
    cls = by_class.groupby("class")["a"].mean()
    coef, folds = _coefficient_tables(report)
    return "\n".join(
        [
            "Mean absolute error of one GPU's kernel time per step (max in brackets), against "
            "`python -m distsim.calibrate steps ../shared/data/h100_steps --fit --lomo` (every table and step class; leave-one-model-out leaves a model's tables out whole: "
            "Scout's FP8 and bf16 rows together, Mixtral's and Qwen3's moe_skew rows with their tables).",
            "",
            *lines,
            "",
            "Leave-one-model-out by step class, all tables: "
            + ", ".join(f"{c} {cls[c]:.1f}%" for c in CLASSES if c in cls.index)
            + ".",
            "",
            "#### The coefficients and the data that pins each",
            "",
            *coef,
            "",
            nnls_markdown(report).split("\n\n", 1)[1],
            "",
            "Fitted with each model left out (the leave-one-model-out folds):",
            "",
            *folds,
        ]
    )


def _coefficient_tables(report: Any) -> tuple[list[str], list[str]]:
    """The fitted coefficients with the data that pins each, and their values in every
    leave-one-model-out fold, as markdown table lines."""
    from distsim.fidelity.steps.nnls import values_of

    fitted = values_of(report.basis_fit.coefficients)
    coef = ["| coefficient | fitted | pinned by |", "|---|---:|---|"]
    coef += [f"| `{k}` | {v:.4g} | {PINNED_BY.get(k, '')} |" for k, v in fitted.items()]
    folds = ["| left out | " + " | ".join(fitted) + " |", "|---|" + "---:|" * len(fitted)]
    for group, f in report.lomo.fits.items():
        folds.append(f"| {group} | " + " | ".join(f"{v:.4g}" for v in values_of(f.coefficients).values()) + " |")
    return coef, folds


def host_section(folder: Path) -> str:
    """Per step class: the measured host-timed step less the GPU time (the stand-in's own host work: input
    copy, graph launch, read-back), beside the host terms fitted on the runs."""
    from distsim.fidelity.steps.data import PRIMARY, _frame, step_class

    rows = []
    for name in PRIMARY:
        path = folder / f"{name}.csv"
        if not path.is_file() or name == "moe_skew":
            continue
        f = _frame(path)
        if "host_step_ms" not in f.columns:
            continue
        host = pd.to_numeric(f["host_step_ms"], errors="coerce") - f["measured_ms"]
        for kind, ctx, h, gpu in zip(f["kind"].astype(str), f["context"], host, f["measured_ms"]):
            rows.append((step_class(kind.strip(), int(ctx)), float(h) * 1000.0, float(gpu) * 1000.0))
    t = pd.DataFrame(rows, columns=["class", "host_us", "gpu_us"]).dropna()
    lines = ["| step class | steps | GPU time, median (us) | host-timed step - GPU time, median (us) | p90 (us) |",
             "|---|---:|---:|---:|---:|"]
    for c in CLASSES:
        part = t[t["class"] == c]
        if len(part):
            lines.append(
                f"| {c} | {len(part)} | {part.gpu_us.median():,.0f} | {part.host_us.median():,.0f} | {part.host_us.quantile(0.9):,.0f} |"
            )
    return "\n".join(lines)


def run_section(root: Path, shipped_table: pd.DataFrame, shipped_lomo: dict | None) -> tuple[str, dict]:
    """The real runs: roofline3 (GPU terms from the steps, host and front end fitted on the runs) in sample
    and leave-one-model-out, beside the shipped model; the load slopes of both."""
    from distsim.fidelity import runfit

    data = json.loads((root / RUNFIT).read_text(encoding="utf-8"))
    fit, lomo = data["fit"], data.get("lomo", {})
    shipped = runfit.headline(shipped_table)
    lines = ["| run | model | TP | roofline (previous default): E2E / TTFT / ITL | roofline3 in sample | roofline3 leave-one-model-out |",
             "|---|---|---:|---|---|---|"]
    tps = shipped_table.drop_duplicates("run").set_index("run")
    for (run, model), row in shipped.iterrows():
        ins, out = fit["runs"].get(str(run), {}), lomo.get("runs", {}).get(str(run), {})
        cell = lambda d: " / ".join(_signed(d.get(m, float("nan"))) for m in runfit.METRICS)  # noqa: E731
        tp = tps.at[run, "tp"] if "tp" in tps.columns else ""
        lines.append(f"| {run} | {model.split('/')[-1]} | {tp} | {cell(dict(row))} | {cell(ins)} | {cell(out)} |")
    summary = _median_table(shipped.abs().median(), shipped_lomo, fit, lomo)
    values = ", ".join(f"`{k.split('.', 1)[1]}` {v:.4g}" for k, v in fit["values"].items())
    folds = ["| left out | " + " | ".join(k.rsplit(".", 1)[1] for k in fit["values"]) + " |", "|---|" + "---:|" * len(fit["values"])]
    for model, v in lomo.get("values", {}).items():
        folds.append(f"| {model.split('/')[-1]} | " + " | ".join(f"{x:.4g}" for x in v.values()) + " |")
    slope_lines, slope_note = _slope_table(shipped_table, pd.DataFrame(data.get("slopes", [])))
    text = "\n".join(
        [
            f"Host and front-end terms fitted on the runs with the GPU terms frozen at the step fit "
            f"(`{RUNFIT_COMMAND}`, {data['evaluations']} replays of every run, {data['seconds'] / 60:.0f} min): "
            f"{values}; `per_output_token_us` held at 0 (the means cannot tell it from `request_us`).",
            "",
            "Whole-run error of mean E2E / mean TTFT / mean ITL per run (positive: the simulator slower):",
            "",
            *lines,
            "",
            "Median absolute error over the runs:",
            "",
            *summary,
            "",
            "The host and front-end terms with each model left out:",
            "",
            *folds,
            "",
            "#### Load slope of the two-rate runs",
            "",
            "Slope of the stage's mean against its arrival rate, (stage 2 - stage 1) / (rate 2 - rate 1); in "
            f"brackets the simulated slope's error. {slope_note}",
            "",
            *slope_lines,
        ]
    )
    return text, fit["values"]


def _median_table(shipped: pd.Series, shipped_lomo: dict | None, fit: dict, lomo: dict) -> list[str]:
    """Median absolute run error of the shipped model and of roofline3, in sample and held out, as
    markdown table lines."""
    rows = [("roofline (previous default), in sample", shipped)]
    if shipped_lomo:
        rows.append(("roofline (previous default), leave-one-model-out (docs/data/h100_fit.json)", shipped_lomo))
    rows += [("roofline3, GPU frozen at the step-only fit, in sample", fit["medians"]),
             ("roofline3, GPU frozen at the step-only fit, leave-one-model-out", lomo.get("medians", {}))]
    lines = ["| model, values | mean E2E | mean TTFT | mean ITL |", "|---|---:|---:|---:|"]
    for label, d in rows:
        if len(d):
            lines.append(f"| {label} | {_pct(d['e2e_mean'])} | {_pct(d['ttft_mean'])} | {_pct(d['itl_mean'])} |")
    return lines


def _slope_table(shipped_table: pd.DataFrame, slopes_new: pd.DataFrame) -> tuple[list[str], str]:
    """The load slope of every two-rate run, measured against the shipped model's and roofline3's, as
    markdown table lines, and how many of each are within 20% of the real slope."""
    from distsim.fidelity import runfit
    from distsim.fidelity.suite.data import read_suite

    slopes_old = runfit.load_slopes(shipped_table, read_suite(Path("..") / "shared" / "data" / "h100_vllm_runs"))
    lines = ["| run | model | rates (req/s) | figure | measured slope (ms per req/s) | roofline (previous default) | roofline3, GPU frozen |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in slopes_old.itertuples():
        new = slopes_new[(slopes_new["run"] == r.run) & (slopes_new["metric"] == r.metric)] if len(slopes_new) else []
        n = new.iloc[0] if len(new) else None
        new_cell = f"{n['simulated']:.3f} ({n['error_pct']:+.0f}%)" if n is not None else "n/a"
        lines.append(
            f"| {r.run} | {str(r.model).split('/')[-1]} | {r.rate0:g} -> {r.rate1:g} | {r.metric.split('_')[0].upper()} | "
            f"{r.measured:.3f} | {r.simulated:.3f} ({r.error_pct:+.0f}%) | {new_cell} |"
        )
    within = lambda s: int((s["error_pct"].abs() <= 20).sum()) if len(s) else 0  # noqa: E731
    note = (f"Within 20% of the real slope: roofline (previous default) {within(slopes_old)} of {len(slopes_old)}, "
            f"roofline3 with its GPU terms frozen {within(slopes_new)} of {len(slopes_new)}.")
    return lines, note


def rtx_section() -> str:
    """The RTX runs (never fitted on) at the previous default (roofline) and at the shipped defaults (roofline3)."""
    from distsim.validate import validate

    metrics = ("ttft_ms.mean", "tpot_ms.mean", "e2e_ms.mean", "e2e_ms.p99")
    shared = Path("..") / "shared" / "data" / "llmservingsim_bench"
    lines = ["| run | model | " + " | ".join(metrics) + " |", "|---|---|" + "---:|" * len(metrics)]
    for name in ("RTX4090_Llama-3.1-8B", "RTXPRO6000_Llama-3.1-8B"):
        for label, o in (("roofline (previous default)", PREVIOUS), ("roofline3 (shipped defaults)", [])):
            c = validate(shared / name, o).comparison
            lines.append(f"| {name} | {label} | " + " | ".join(_signed(c[m].error_pct) for m in metrics) + " |")
    return "\n".join(lines)
