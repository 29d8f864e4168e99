"""The sampler's terms (roofline3's ``sampler_call_us``, ``sampler_bytes_per_logit``,
``sampler_extra_rows``) from the H100 measurements of docs/data/h100_serving (its sampling.csv: vLLM's
temperature-sampling passes, float32 logits, softmax, an exponential draw and argmax, replayed in a CUDA
graph, by batch and vocabulary): least squares of the time on 1, V and R x V, i.e.
time = call + V x (R + extra) x bytes / (bandwidth x memory_efficiency).

    python scripts/sampler_fit.py [docs/data/h100_serving/run2/sampling.csv] [--op random_exp]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from distsim.catalog import load_hardware
from distsim.instance.latency.roofline3 import DEFAULTS


def fit(csv: str, op: str) -> dict[str, float]:
    d = pd.read_csv(csv)
    d = d[(d["op"] == op) & d["graph_us"].notna()]
    v, r = d["vocab"].to_numpy(float), d["batch"].to_numpy(float)
    a = np.column_stack([np.ones_like(v), v, r * v])
    (call, per_vocab, per_logit), *_ = np.linalg.lstsq(a, d["graph_us"].to_numpy(float), rcond=None)
    bw = load_hardware("H100").hbm_bw_tbps * 1e6 * DEFAULTS.memory_efficiency  # bytes per us
    rel = np.abs(a @ [call, per_vocab, per_logit] / d["graph_us"].to_numpy(float) - 1)
    return {"sampler_call_us": round(float(call), 2), "sampler_bytes_per_logit": round(float(per_logit * bw), 2),
            "sampler_extra_rows": round(float(per_vocab / per_logit), 2), "rows": len(d),
            "mean_abs_error_pct": round(float(rel.mean() * 100), 1), "max_abs_error_pct": round(float(rel.max() * 100), 1)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="?", default="docs/data/h100_serving/run2/sampling.csv")
    p.add_argument("--op", default="random_exp")
    args = p.parse_args(argv)
    print(fit(args.csv, args.op))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
