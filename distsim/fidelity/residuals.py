"""Where each run's error sits: measured against simulated mean ITL and TTFT, the simulated side split
into the step model's parts, so that a serving term is added because a residual asks for it.

    python -m distsim.calibrate residuals ../shared/data/h100_vllm_runs [overrides...] [--runs 48,60] [--out FILE.md]

Per run (its whole-run figures, stage -1), one replay at the given values:

- **ITL** is the decode step, so the simulated mean ITL is split by each part's share of the replay's
  busy time (instances.parquet): kernels (busy time less the serving terms), collectives, CUDA-graph
  padding, sampling and exposed host time. The residual (measured - simulated) is in milliseconds.
- **TTFT** is the front end (``request_us`` + ``per_input_token_us`` x the replay's mean prompt) and the
  rest (queueing for a step, the steps that compute the prompt: async scheduling's step after next).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import pandas as pd

from distsim import outputs
from distsim.errors import UserError
from distsim.fidelity.metrics import WHOLE_RUN, stage_metrics
from distsim.fidelity.suite.data import parse_ids, read_suite
from distsim.fidelity.suite.replay import suite_config
from distsim.metrics.tables import SERVING_COLUMNS
from distsim.simulate import simulate

PARTS = ("kernels", "collectives", "padding", "eager", "sampler", "host")
COLUMNS = ["run", "model", "tp", "itl_measured", "itl_simulated", *(f"itl_{p}" for p in PARTS), "ttft_measured",
           "ttft_simulated", "ttft_front_end", "ttft_engine"]


def decompose(folder: str, overrides: Sequence[str] = (), run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run of ``run_ids`` (None: all; an id the folder lacks is a UserError, as in every
    stage: Suite.select): measured and simulated means (ms) and the simulated parts (module docstring)."""
    suite = read_suite(folder)
    rows = []
    for run in suite.select(run_ids):
        measured = suite.measured_for(run)
        whole = measured[measured["stage_index"] == WHOLE_RUN].drop_duplicates("metric_name").set_index("metric_name")["actual"]
        if "itl_mean" not in whole:
            continue
        cfg = suite_config(run, overrides)
        result = simulate(cfg)
        reqs = result.requests
        done = reqs[reqs["status"] == "completed"]
        sim = stage_metrics(
            pd.DataFrame({"arrival_s": done["arrival_ms"] / 1000.0, "completed": True, "e2e_ms": done["e2e_ms"],
                          "ttft_ms": done["ttft_ms"], "output_tokens": done["output_tokens"]}),
            [s.duration_s for s in run.workload.stages],
        )
        sim = sim[sim["stage"] == WHOLE_RUN].set_index("metric")["value"]
        inst = result.instances
        busy = float(inst["busy_ms"].sum())
        serving = {c: float(inst[c].sum()) if c in inst else 0.0 for c in SERVING_COLUMNS}
        shares = {"kernels": busy - sum(serving.values()), "collectives": serving["collectives_ms"],
                  "padding": serving["padding_ms"], "eager": serving["eager_ms"], "sampler": serving["sampler_ms"],
                  "host": serving["host_ms"]}
        itl = float(sim["itl_mean"])
        fe = cfg.cluster.frontend
        front = (float(fe.request_us) + float(fe.per_input_token_us) * float(done["input_tokens"].mean())) / 1000.0
        ttft = float(sim["ttft_mean"])
        rows.append([run.id, run.model_name.split("/")[-1], run.tp, float(whole["itl_mean"]), itl,
                     *(itl * shares[p] / busy if busy else math.nan for p in PARTS),
                     float(whole["ttft_mean"]), ttft, front, ttft - front])
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown(table: pd.DataFrame) -> str:
    """The decomposition as a markdown table (ms; the residual is measured - simulated)."""
    head = ("| run | model | TP | ITL measured | simulated | residual | kernels | collectives | padding | eager | sampling | host "
            "| TTFT measured | simulated | residual | front end | engine |")
    lines = [head, "|---|---|---:|" + "---:|" * 14]
    for r in table.itertuples(index=False):
        lines.append(
            f"| {r.run} | {r.model} | {r.tp} | {r.itl_measured:.2f} | {r.itl_simulated:.2f} | "
            f"{r.itl_measured - r.itl_simulated:+.2f} | {r.itl_kernels:.2f} | {r.itl_collectives:.2f} | "
            f"{r.itl_padding:.2f} | {r.itl_eager:.2f} | {r.itl_sampler:.2f} | {r.itl_host:.2f} | {r.ttft_measured:.1f} | "
            f"{r.ttft_simulated:.1f} | {r.ttft_measured - r.ttft_simulated:+.1f} | {r.ttft_front_end:.1f} | "
            f"{r.ttft_engine:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m distsim.calibrate residuals", description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--runs", default=None, help="comma-separated run ids (default: every run)")
    p.add_argument("--out", default=None, help="write the markdown table here")
    args = p.parse_intermixed_args(argv)  # overrides before or after the options, as in the other stages
    try:
        if args.out:
            outputs.prepare_file(args.out)  # a bad --out fails before the replays, not after them
        text = markdown(decompose(args.folder, args.overrides, parse_ids(args.runs)))
        if args.out:
            outputs.write_text(args.out, text + "\n")
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0

