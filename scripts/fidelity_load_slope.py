"""How the replay's prompts and async scheduling move the load slope: the H100 runs replayed four ways.

    python scripts/fidelity_load_slope.py [--out docs/data/load_slope.md]   # about 1 minute

1. ``trace``: the shipped replay (``python -m distsim.fidelity.suite``): every request a fresh question
   behind its group's shared system prompt, as the trace is written.
2. ``pool``: ``replay.prompts=pool``: the prompts inference-perf's ``shared_prefix`` generator sent, one
   fixed prompt per user, repeated every round, so that vLLM's prefix cache held the whole prompt after
   its first round (:func:`distsim.fidelity.suite.data.pool_trace`).
3. ``pool + async``: the same, with vLLM V1's asynchronous scheduling (on by default in the vLLM 0.15 the
   runs used): ``cluster.engine.async_scheduling=true`` (distsim/instance/scheduler.py): step N+1 is
   scheduled while step N runs, so a request that reaches a busy engine is first scheduled into the step
   after the next one.

The first two set ``cluster.engine.async_scheduling=false``, the first ``replay.prompts=trace``; the first three keep the shipped coefficients; the fourth is the third with the GPU terms of the step-only
fit (``STEP_FIT``, before the joint refit moved them on the trace replay) and no host time. Prints and writes a Markdown report: medians, the
load-slope table, the loaded stage's TTFT percentiles, and the running batch by Little's law.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from distsim import outputs  # noqa: E402
from distsim.fidelity import runfit  # noqa: E402
from distsim.fidelity.suite.data import Suite, read_suite  # noqa: E402
from distsim.fidelity.suite.replay import compare_run, simulated_requests, skip_reason, suite_config  # noqa: E402
from distsim.instance.latency.roofline3 import STEP_FIT  # noqa: E402

FOLDER = ROOT.parent / "shared" / "data" / "h100_vllm_runs"
# the GPU terms of the step-only fit (before the joint refit moved them on the trace replay), no host time
STEP_ONLY = [f"cluster.latency.{name}={getattr(STEP_FIT, name)}" for name in (
    "compute_efficiency", "gemm_half_tokens", "memory_efficiency", "layer_overhead_us", "moe_layer_overhead_us",
    "all_reduce_latency_us")] + ["cluster.latency.step_overhead_us=0", "cluster.latency.sequence_overhead_us=0"]
POOL_ASYNC = ["replay.prompts=pool", "cluster.engine.async_scheduling=true"]  # the shipped replay
CONFIGS = {  # name -> overrides
    "trace": ["replay.prompts=trace", "cluster.engine.async_scheduling=false"],
    "pool": ["replay.prompts=pool", "cluster.engine.async_scheduling=false"],
    "pool + async": POOL_ASYNC,
    "pool + async, step-only GPU terms": POOL_ASYNC + STEP_ONLY,
}


def replay_all(suite: Suite, overrides: list[str]) -> pd.DataFrame:
    """Every comparable run replayed: the suite's table (run, stage, metric, measured, simulated, ...)."""
    tables = []
    for run in suite.runs:
        if skip_reason(run, suite) is None:
            sim = simulated_requests(run, suite_config(run, overrides))
            tables.append(compare_run(run, sim, suite.measured_for(run), []))
    return pd.concat(tables, ignore_index=True)


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.0f}%"


def medians_lines(suite: Suite, tables: dict[str, pd.DataFrame]) -> list[str]:
    lines = ["| replay | mean E2E | mean TTFT | mean ITL | slopes within 20% |", "|---|---:|---:|---:|---:|"]
    for name, table in tables.items():
        med = runfit.medians(table)
        slopes = runfit.load_slopes(table, runfit.stage_rates(suite))
        within = int((slopes["error_pct"].abs() <= 20).sum())
        lines.append(f"| {name} | {med['e2e_mean']:.1f}% | {med['ttft_mean']:.1f}% | {med['itl_mean']:.1f}% "
                     f"| {within} of {len(slopes)} |")
    return lines


def slope_lines(suite: Suite, tables: dict[str, pd.DataFrame]) -> list[str]:
    slopes = {name: runfit.load_slopes(t, runfit.stage_rates(suite)).set_index(["run", "metric"]) for name, t in tables.items()}
    first = next(iter(slopes.values()))
    lines = ["| run | model | rates (req/s) | figure | measured (ms per req/s) | " + " | ".join(tables) + " |",
             "|---|---|---|---|---:|" + "---:|" * len(tables)]
    for (run, metric), row in first.iterrows():
        cells = [f"{s.at[(run, metric), 'simulated']:.3f} ({_pct(s.at[(run, metric), 'error_pct'])})" for s in slopes.values()]
        lines.append(f"| {run} | {row['model'].split('/')[-1]} | {row['rate0']:g} -> {row['rate1']:g} "
                     f"| {metric.split('_')[0].upper()} | {row['measured']:.3f} | " + " | ".join(cells) + " |")
    return lines


def stage_lines(suite: Suite, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The loaded stage (the last) of each two-rate run: TTFT mean / p90 / p99 and the running batch
    (rate x mean E2E, Little's law), measured and per replay."""
    rates = {r.id: [s.rate_rps for s in r.workload.stages] for r in suite.runs}
    lines = ["| run | stage | rate | measured: TTFT mean / p90 / p99 (ms), batch | "
             + " | ".join(tables) + " |", "|---|---:|---:|---|" + "---|" * len(tables)]
    first = next(iter(tables.values()))
    for run in dict.fromkeys(first["run"]):
        if len(rates.get(str(run), [])) != 2:
            continue
        for stage in (0, 1):
            cells = []
            for column, table in (("measured", first), *((("simulated", t)) for t in tables.values())):
                got = table[(table["run"] == run) & (table["stage"] == stage)].set_index("metric")[column]
                batch = rates[str(run)][stage] * got.get("e2e_mean", math.nan) / 1000.0
                cells.append(" / ".join(f"{got.get(m, math.nan):.0f}" for m in ("ttft_mean", "ttft_p90", "ttft_p99"))
                             + f", {batch:.0f}")
            lines.append(f"| {run} | {stage} | {rates[str(run)][stage]:g} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "data" / "load_slope.md"))
    args = p.parse_args(argv)
    suite = read_suite(FOLDER)
    tables = {name: replay_all(suite, over) for name, over in CONFIGS.items()}
    text = "\n".join([
        "# Load slope of the H100 runs, replayed four ways (scripts/fidelity_load_slope.py)", "",
        "Shipped coefficients but in the last column (the step-only fit's GPU terms, no host time);"
        " error = (simulated - measured) / measured.", "",
        "## Median absolute error over the 13 runs", "", *medians_lines(suite, tables), "",
        "## Load slope of the two-rate runs (simulated slope, its error)", "", *slope_lines(suite, tables), "",
        "## Each stage: TTFT mean / p90 / p99 and the running batch (rate x mean E2E)", "", *stage_lines(suite, tables), "",
    ])
    outputs.write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
