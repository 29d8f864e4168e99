"""Output tokens as the client counted them, against the tokens the engine generated, per H100 run.

    python scripts/output_token_count.py [../shared/data/h100_vllm_runs] [--runfit docs/data/h100_runfit.json]

The runs' ``itl_mean`` is (mean E2E - mean TTFT) / (mean output tokens - 1) with the output tokens the load
generator counted: inference-perf (the version of February 2026, inference_perf/apis/completion.py)
re-tokenises the streamed text (``tokenizer.count_tokens(output_text)``), and asks for ``ignore_eos``
(its default), so vLLM generates exactly ``max_tokens`` = the trace's output length. Tokens that
detokenise to nothing (special tokens such as a base model's repeated end-of-sequence, which vLLM's
detokeniser skips) are generated and timed but not counted. The implied count is (E2E - TTFT) / ITL + 1;
where it falls short of the trace's, the measured ITL is per counted token, and the simulator's ITL
(per generated token) is compared with a larger number than it should be. The decode span's error,
(E2E - TTFT) simulated against measured, is the same comparison with no token count in it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from distsim.fidelity.metrics import WHOLE_RUN
from distsim.fidelity.suite.data import Suite, SuiteRun, read_suite


def _whole_run(suite: Suite, run: SuiteRun) -> pd.Series:
    """The run's measured whole-run means (stage -1; the request-weighted stages where it has none)."""
    m = suite.measured_for(run).drop_duplicates(["stage_index", "metric_name"])
    m = m[m.metric_name.isin(["e2e_mean", "ttft_mean", "itl_mean"])].pivot(index="stage_index", columns="metric_name", values="actual")
    if WHOLE_RUN in m.index:
        return m.loc[WHOLE_RUN]
    rates = [s.rate_rps * s.duration_s for s in run.workload.stages]
    w = pd.Series(rates[: len(m)], index=m.index[: len(rates)]) / sum(rates[: len(m)])
    whole = (m.mul(w, axis=0)).sum()
    return whole


def table(folder: Path, runfit: Path) -> pd.DataFrame:
    suite = read_suite(folder)
    fit = json.loads(runfit.read_text(encoding="utf-8"))
    rows = []
    for run in suite.runs:
        err = fit["fit"]["runs"].get(run.id)
        if err is None:
            continue
        m = _whole_run(suite, run)
        generated = float(pd.read_csv(run.trace).output_tokens.mean())
        counted = (m.e2e_mean - m.ttft_mean) / m.itl_mean + 1.0
        span = {}
        for label, e in (("in_sample", err), ("lomo", fit["lomo"]["runs"][run.id])):
            sim_span = m.e2e_mean * (1 + e["e2e_mean"] / 100) - m.ttft_mean * (1 + e["ttft_mean"] / 100)
            span[label] = 100.0 * (sim_span / (m.e2e_mean - m.ttft_mean) - 1.0)
        rows.append({
            "run": run.id, "model": run.model_name.split("/")[-1], "generated": generated, "counted": counted,
            "ratio": counted / generated, "itl_in_sample": err["itl_mean"], "span_in_sample": span["in_sample"],
            "itl_lomo": fit["lomo"]["runs"][run.id]["itl_mean"], "span_lomo": span["lomo"],
        })
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame) -> str:
    lines = [
        "| run | model | output tokens generated (trace) | counted by the client (implied) | counted / generated "
        "| mean ITL error, in sample | decode span (E2E - TTFT) error, in sample | ITL error, LOMO | decode span error, LOMO |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(f"| {r.run} | {r.model} | {r.generated:.0f} | {r.counted:.0f} | {r.ratio:.3f} | {r.itl_in_sample:+.1f}% "
                     f"| {r.span_in_sample:+.1f}% | {r.itl_lomo:+.1f}% | {r.span_lomo:+.1f}% |")
    med = lambda c: t[c].abs().median()  # noqa: E731
    lines.append(f"| median abs | | | | | {med('itl_in_sample'):.1f}% | {med('span_in_sample'):.1f}% | {med('itl_lomo'):.1f}% | {med('span_lomo'):.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default="../shared/data/h100_vllm_runs")
    parser.add_argument("--runfit", default="docs/data/h100_runfit.json")
    args = parser.parse_args(argv)
    print(markdown(table(Path(args.folder), Path(args.runfit))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
