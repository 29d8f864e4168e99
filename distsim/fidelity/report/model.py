"""The model's tables of docs/fidelity.md (written by scripts/fidelity_h100.py): the step model
(``cluster.latency.kind=roofline3``) on the step tables in sample and leave-one-model-out, its
coefficients with the data that pins each, GPU against host time per step class, the real runs in sample
and leave-one-model-out (from docs/data/h100_runfit.json, which ``python -m distsim.fidelity.runfit``
writes), the load slope of the two-rate runs, where each run's error sits (distsim.fidelity.residuals),
and the RTX runs held out. Each figure is measured here or by the committed command named beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distsim.fidelity.steps.compare import CLASSES
from distsim.instance.latency.roofline3 import DEFAULTS

ROOFLINE3 = ["cluster.latency.kind=roofline3"]
# the older roofline (cluster.latency.kind=roofline) with its fitted front end (docs/data/h100_fit.json)
PREVIOUS = [
    "cluster.latency.kind=roofline", "cluster.frontend.request_us=1778", "cluster.frontend.per_input_token_us=5.48",
    "cluster.frontend.per_output_token_us=15.5",
]
RUNFIT = Path("docs") / "data" / "h100_runfit.json"
RUNFIT_COMMAND = (  # every other term at the shipped defaults (GPU terms from the steps, serving terms measured)
    "python -m distsim.calibrate runs ../shared/data/h100_vllm_runs --lomo --terms "
    "cluster.latency.all_reduce_latency_us,cluster.frontend.request_us,cluster.frontend.per_input_token_us "
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
    """Per table: the older roofline, roofline3 fitted in sample and leave-one-model-out; the fit."""
    from distsim.fidelity.steps.cli import nnls_markdown, run_nnls, run_steps

    shipped = _mae(run_steps(folder, PREVIOUS).steps)
    report = run_nnls(folder, ROOFLINE3, with_lomo=True)
    at_defaults, fitted, lomo = _mae(report.steps), _mae(report.fitted_steps), _mae(report.lomo.steps)
    maxes = report.fitted_steps.assign(a=report.fitted_steps["error_pct"].abs()).groupby("model", sort=False)["a"].max()
    lomo_max = report.lomo.steps.assign(a=report.lomo.steps["error_pct"].abs()).groupby("model", sort=False)["a"].max()
    lines = [
        "| table | steps | roofline (older model) | roofline3 at its defaults (the step-only fit) | roofline3 step-only fit (max) | leave-one-model-out (max) |",
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
            "`python -m distsim.calibrate steps ../shared/data/h100_steps --fit "
            "--lomo` (every table and step class; leave-one-model-out leaves a model's tables out whole: "
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
    from distsim.fidelity.steps.data import PRIMARY, read_frame, step_class

    rows = []
    for name in PRIMARY:
        path = folder / f"{name}.csv"
        if not path.is_file() or name == "moe_skew":
            continue
        f = read_frame(path)
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


def run_section(root: Path) -> str:
    """The real runs at the shipped defaults (the terms the runs pin fitted on them, every other term
    frozen) in sample and leave-one-model-out, the folds' values and the load slopes."""
    from distsim.fidelity import runfit

    data = json.loads((root / RUNFIT).read_text(encoding="utf-8"))
    fit, lomo = data["fit"], data.get("lomo", {})
    cell = lambda d: " / ".join(_signed(d.get(m, float("nan"))) for m in runfit.METRICS)  # noqa: E731
    lines = ["| run | in sample: E2E / TTFT / ITL | leave-one-model-out |", "|---|---|---|"]
    for run, ins in fit["runs"].items():
        lines.append(f"| {run} | {cell(ins)} | {cell(lomo.get('runs', {}).get(run, {}))} |")
    medians = ["| values | mean E2E | mean TTFT | mean ITL |", "|---|---:|---:|---:|"]
    for label, d in (("in sample", fit["medians"]), ("leave-one-model-out", lomo.get("medians", {}))):
        if d:
            medians.append(f"| {label} | {_pct(d['e2e_mean'])} | {_pct(d['ttft_mean'])} | {_pct(d['itl_mean'])} |")
    values = ", ".join(f"`{k}` {v:.4g}" for k, v in fit["values"].items())
    folds = ["| left out | " + " | ".join(k.rsplit(".", 1)[1] for k in fit["values"]) + " |", "|---|" + "---:|" * len(fit["values"])]
    for model, v in lomo.get("values", {}).items():
        folds.append(f"| {model.split('/')[-1]} | " + " | ".join(f"{x:.4g}" for x in v.values()) + " |")
    slope_lines, within, count = _slopes(pd.DataFrame(data.get("slopes", [])))
    return "\n".join(
        [
            f"`{RUNFIT_COMMAND}` ({data['evaluations']} replays of every run, {data['seconds'] / 60:.0f} min): "
            f"{values}; `per_output_token_us` held at 0 (the means cannot tell it from `request_us`).",
            "",
            "Whole-run error of mean E2E / mean TTFT / mean ITL per run (positive: the simulator slower):",
            "",
            *lines,
            "",
            "Median absolute error over the runs:",
            "",
            *medians,
            "",
            "The fitted terms with each model left out:",
            "",
            *folds,
            "",
            "#### Load slope of the two-rate runs",
            "",
            "Slope of the stage's mean against its arrival rate, (stage 2 - stage 1) / (rate 2 - rate 1); in "
            f"brackets the simulated slope's error. Within 20% of the real slope: {within} of {count}.",
            "",
            *slope_lines,
        ]
    )


def _slopes(slopes: pd.DataFrame) -> tuple[list[str], int, int]:
    """The load slopes as markdown table lines, how many are within 20% of the measured, of how many."""
    lines = ["| run | model | rates (req/s) | figure | measured slope (ms per req/s) | simulated (error) |",
             "|---|---|---|---|---:|---:|"]
    for r in slopes.itertuples():
        lines.append(f"| {r.run} | {str(r.model).split('/')[-1]} | {r.rate0:g} -> {r.rate1:g} | "
                     f"{r.metric.split('_')[0].upper()} | {r.measured:.3f} | {r.simulated:.3f} ({r.error_pct:+.0f}%) |")
    within = int((slopes["error_pct"].abs() <= 20).sum()) if len(slopes) else 0
    return lines, within, len(slopes)


def residual_section(folder: Path) -> str:
    """Where each run's error sits at the shipped defaults (distsim.fidelity.residuals)."""
    from distsim.fidelity.residuals import decompose, markdown

    return (
        "`python -m distsim.calibrate residuals ../shared/data/h100_vllm_runs`: per run, measured against "
        "simulated mean ITL and TTFT (ms); the simulated ITL split by each part's share of the replay's busy "
        "time (instances.parquet), the simulated TTFT into the front end and the engine (queueing and the "
        "steps that compute the prompt). Residual = measured - simulated.\n\n" + markdown(decompose(str(folder)))
    )


def rtx_section() -> str:
    """The RTX runs at the older roofline, priced from the datasheet alone (the H100's achieved fractions:
    what any GPU without runs gets) and at the shipped defaults (the catalog's achieved values, fitted on
    these same runs: in sample)."""
    from distsim.fidelity.validation import validate

    metrics = ("ttft_ms.mean", "tpot_ms.mean", "e2e_ms.mean", "e2e_ms.p99")
    shared = Path("..") / "shared" / "data" / "llmservingsim_bench"
    datasheet = [f"cluster.latency.{k}={getattr(DEFAULTS, k)!r}" for k in ("memory_efficiency", "compute_efficiency")]
    lines = ["| run | model | " + " | ".join(metrics) + " |", "|---|---|" + "---:|" * len(metrics)]
    for name in ("RTX4090_Llama-3.1-8B", "RTXPRO6000_Llama-3.1-8B"):
        # the bench runner pins temperature 0: its reader replays greedy (distsim.fidelity.bench_format)
        for label, o in (("roofline (older model)", PREVIOUS), ("roofline3, datasheet only (held out)", datasheet),
                         ("roofline3, shipped (achieved terms fitted on this run)", [])):
            c = validate(shared / name, o).comparison
            lines.append(f"| {name} | {label} | " + " | ".join(_signed(c[m].error_pct) for m in metrics) + " |")
    return "\n".join(lines)
