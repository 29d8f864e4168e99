"""Fit the serving terms from the raw files of scripts/measure_serving_h100.py into one summary.json.

The data folder holds one sub-folder per GPU run (``run1``, ``run2``, ...; each the script's ``--out``).
Sampling, lm_head and token-copy figures come from the last run (the script's current method: the
sampler's device time from several calls per captured graph); the decode-stack, step-loop and host-loop
figures are the mean of every run's medians, with the spread between runs beside them.

    python scripts/analyse_serving_h100.py docs/data/h100_serving          # writes its summary.json
    python scripts/analyse_serving_h100.py docs/data/h100_serving --check  # exit 1 if it is stale

Every figure in the summary is computed here from the raw files: none is typed in.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SUMMARY = "summary.json"
SAMPLER_OPS = ("fp32_cast", "greedy", "random_exp", "topk_only", "topk_topp_sort", "sort_only", "logprobs")


def fit_affine(x, y, relative: bool = True) -> dict:
    """y = a + b x by least squares, on relative error (each point weighs the same) or on absolute error
    (the large points rule: for a term added to a step, the microseconds matter), with the worst misses."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    w = 1.0 / y if relative else np.ones_like(y)
    (a, b), *_ = np.linalg.lstsq(np.column_stack([w, x * w]), y * w, rcond=None)
    miss = a + b * x - y
    return {"a": float(a), "b": float(b), "max_rel_err": float(np.abs(miss / y).max()),
            "max_abs_err": float(np.abs(miss).max())}


def _r(v: float, nd: int = 1) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), nd)


def _table(df: pd.DataFrame, key: str, col: str, nd: int = 1) -> dict[str, float | None]:
    return {str(int(k)): _r(v, nd) for k, v in zip(df[key], df[col])}


def runs_of(folder: Path) -> list[Path]:
    runs = sorted((p for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"run\d+", p.name)),
                  key=lambda p: int(p.name[3:]))
    if not runs:
        raise SystemExit(f"{folder}: no run1, run2, ... folders")
    return runs


def mean_over_runs(runs: list[Path], name: str, keys: list[str]) -> tuple[pd.DataFrame, dict]:
    """Rows present in every run, each numeric column the mean of the runs; the spread of `name`'s rows."""
    frames = [pd.read_csv(r / name) for r in runs if (r / name).is_file()]
    cat = pd.concat(frames, keys=range(len(frames)), names=["run", "row"]).reset_index(level=0)
    n = cat.groupby(keys)["run"].nunique()
    full = n[n == len(frames)].index
    cat = cat.set_index(keys).loc[full].reset_index()
    mean = cat.drop(columns="run").groupby(keys, sort=True).mean().reset_index()
    return mean, {"runs": len(frames), "frame": cat}


def spread(cat: pd.DataFrame, keys: list[str], col: str) -> dict:
    """Median and largest relative distance of a run's value from the runs' mean."""
    g = cat.groupby(keys)[col]
    rel = (cat[col] / g.transform("mean") - 1.0).abs()
    return {"median_rel": _r(rel.median(), 4), "max_rel": _r(rel.max(), 4)}


def sampling_summary(run: Path) -> dict:
    s = pd.read_csv(run / "sampling.csv")
    dev = {}
    per_vocab, per_logit, wall = {}, {}, {}
    for op in sorted(s.op.unique()):
        d = s[s.op == op].sort_values(["vocab", "batch"])
        wall[op] = {str(v): _table(g, "batch", "eager_wall_us") for v, g in d.groupby("vocab")}
        if op not in SAMPLER_OPS:
            continue
        dev[op] = {str(v): _table(g, "batch", "graph_us") for v, g in d.groupby("vocab")}
        per_vocab[op] = {}
        for v, g in d.groupby("vocab"):
            f = fit_affine(g.batch, g.graph_us)
            per_vocab[op][str(v)] = {"a_us": _r(f["a"]), "b_us_per_seq": _r(f["b"], 3),
                                     "max_rel_err": _r(f["max_rel_err"], 3), "max_abs_err_us": _r(f["max_abs_err"])}
        f = fit_affine(d.batch * d.vocab, d.graph_us, relative=False)
        per_logit[op] = {"call_us": _r(f["a"]), "ps_per_logit": _r(f["b"] * 1e6, 3),
                         "max_abs_err_us": _r(f["max_abs_err"]), "max_rel_err": _r(f["max_rel_err"], 3)}
    return {
        "device_us": dev,
        "fit_per_vocab": per_vocab,
        "fit_per_logit": per_logit,
        "eager_wall_us": wall,
    }


def lm_head_summary(run: Path) -> dict:
    lm = pd.read_csv(run / "lm_head.csv").sort_values(["hidden", "vocab", "batch"])
    out = {}
    for (h, v), g in lm.groupby(["hidden", "vocab"]):
        b1, top = g[g.batch == g.batch.min()].iloc[0], g[g.batch == g.batch.max()].iloc[0]
        out[f"h{h}_v{v}"] = {"device_us": _table(g, "batch", "dev_us"),
                             "weight_tbps_at_b1": _r(b1.weight_gbps / 1e3, 3),
                             f"tflops_at_b{int(top.batch)}": _r(top.tflops, 1)}
    return out


def token_copy_summary(run: Path) -> dict:
    d = pd.read_csv(run / "d2h.csv")
    out = {}
    for m, g in d.groupby("method", sort=True):
        f = fit_affine(g.batch, g.wall_us)
        out[m] = {"wall_us": _table(g.sort_values("batch"), "batch", "wall_us"),
                  "fit": {"fixed_us": _r(f["a"]), "per_seq_us": _r(f["b"], 4), "max_rel_err": _r(f["max_rel_err"], 3)}}
    return out


def graph_summary(runs: list[Path], env: dict) -> dict:
    g, info = mean_over_runs(runs, "graph.csv", ["kv_len", "batch"])
    sizes = env.get("vllm_capture_sizes_max_num_seqs_256", [])
    kernels, layers = env.get("kernels_per_step_eager_b1", -1), env.get("layers", 0)
    gap = g.eager_dev_us - g.graph_us
    out: dict = {
        "capture_sizes": sizes,
        "kernels_per_step": kernels,
        "layers": layers,
        "replay_us": {}, "eager_us": {}, "fit_replay": {},
        "eager_minus_graph_us": {"per_step_median": _r(gap.median()), "per_step_p10": _r(gap.quantile(0.1)),
                                 "per_step_p90": _r(gap.quantile(0.9)),
                                 "per_layer": _r(gap.median() / layers, 2) if layers else None,
                                 "per_kernel": _r(gap.median() / kernels, 3) if kernels > 0 else None},
        "host_enqueue_us": {"per_step_median": _r(g.eager_enqueue_us.median()),
                            "per_kernel": _r(g.eager_enqueue_us.median() / kernels, 2) if kernels > 0 else None},
        "padding": [],
        "run_spread_of_replay": spread(info["frame"], ["kv_len", "batch"], "graph_us") | {"runs": info["runs"]},
    }
    for kv, d in g.groupby("kv_len"):
        k = f"kv{kv}"
        cap = d[d.captured == 1]
        out["replay_us"][k] = _table(cap, "batch", "graph_us")
        out["eager_us"][k] = _table(cap, "batch", "eager_dev_us")
        f = fit_affine(d.batch, d.graph_us)
        out["fit_replay"][k] = {"a_us": _r(f["a"]), "b_us_per_seq": _r(f["b"], 3), "max_rel_err": _r(f["max_rel_err"], 3)}
        by_b = dict(zip(d.batch, d.graph_us))
        for _, row in d[d.captured == 0].iterrows():
            p = int(row.padded_to)
            if p in by_b:
                cost = by_b[p] - row.graph_us
                out["padding"].append({"kv_len": int(kv), "batch": int(row.batch), "padded_to": p,
                                       "graph_us": _r(row.graph_us), "padded_graph_us": _r(by_b[p]),
                                       "cost_us": _r(cost), "cost_rel": _r(cost / row.graph_us, 4)})
    return out


def loop_summary(runs: list[Path]) -> dict:
    lp, info = mean_over_runs(runs, "loop.csv", ["kv_len", "batch"])
    lp["exposed_host_us"] = lp.step_wall_us - lp.graph_us - lp.lm_head_greedy_us
    cols = ["step_wall_us", "graph_us", "lm_head_greedy_us", "exposed_host_us", "inputs_us", "launch_us",
            "sync_tolist_us", "bookkeeping_us"]
    return {"kv_len": int(lp.kv_len.iloc[0]), "runs": info["runs"],
            "by_batch": {str(int(r.batch)): {c: _r(r[c]) for c in cols} for _, r in lp.iterrows()}}


def host_summary(runs: list[Path]) -> dict:
    h, info = mean_over_runs(runs, "host.csv", ["batch", "phase"])
    out: dict = {"runs": info["runs"], "fit": {}, "us": {}}
    for ph, g in h.groupby("phase", sort=True):
        f = fit_affine(g.batch, g.us)
        out["fit"][ph] = {"fixed_us": _r(f["a"], 2), "per_seq_us": _r(f["b"], 3), "max_rel_err": _r(f["max_rel_err"], 3)}
        out["us"][ph] = _table(g, "batch", "us", 2)
    out["run_spread_of_step_total"] = spread(info["frame"][info["frame"].phase == "step_total"], ["batch"], "us")
    return out


def source(runs: list[Path]) -> dict:
    envs = [json.loads((r / "env.json").read_text()) for r in runs]
    e = envs[-1]
    smi = e.get("nvidia_smi", "").splitlines()
    fields = dict(zip([c.strip() for c in smi[0].split(",")], [c.strip() for c in smi[1].split(",")])) if len(smi) > 1 else {}
    return {"runs": {r.name: x.get("date_utc") for r, x in zip(runs, envs)},
            "gpu": e.get("gpu"), "driver": fields.get("driver_version"), "max_sm_clock": fields.get("clocks.max.sm [MHz]"),
            "torch": e.get("torch"), "cuda": e.get("cuda"), "python": e.get("python"), "cpu": e.get("cpu_model"),
            "sdpa_backend": e.get("sdpa_backend")}


def headline(out: dict, vocab: str = "128256", batches: tuple[str, ...] = ("1", "64", "256")) -> dict:
    """The few figures a reader wants first, picked from the sections below (nothing new computed)."""
    dev = out["sampling"]["device_us"]
    g = out["cuda_graph"]
    return {
        f"sampler_device_us_v{vocab}": {op: {b: dev[op].get(vocab, {}).get(b) for b in batches}
                                        for op in ("greedy", "random_exp", "topk_topp_sort") if op in dev},
        "graph_replay_us_kv512": {b: g["replay_us"].get("kv512", {}).get(b) for b in batches},
        "eager_minus_graph_us_per_step": g["eager_minus_graph_us"]["per_step_median"],
        "eager_minus_graph_us_per_kernel": g["eager_minus_graph_us"]["per_kernel"],
        "host_enqueue_us_per_kernel": g["host_enqueue_us"]["per_kernel"],
        "host_loop_fixed_us": out["host_loop"]["fit"]["step_total"]["fixed_us"],
        "host_loop_per_seq_us": out["host_loop"]["fit"]["step_total"]["per_seq_us"],
        "token_tolist_fixed_us": out["token_copy"]["tolist"]["fit"]["fixed_us"],
    }


def analyse(folder: Path) -> dict:
    runs = runs_of(folder)
    last = runs[-1]
    env = json.loads((last / "env.json").read_text())
    out = {
        "source": source(runs),
        "units": "microseconds unless a key names another unit; batch sizes as string keys",
        "sampling": sampling_summary(last),
        "lm_head": lm_head_summary(last),
        "token_copy": token_copy_summary(last),
        "cuda_graph": graph_summary(runs, env),
        "step_loop": loop_summary(runs),
        "host_loop": host_summary(runs),
    }
    return {"headline": headline(out)} | out


def render(summary: dict) -> str:
    return json.dumps(summary, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 if the folder's summary.json differs")
    a = ap.parse_args(argv)
    text = render(analyse(a.folder))
    path = a.folder / SUMMARY
    if a.check:
        same = path.is_file() and path.read_text() == text
        print(f"{path}: {'up to date' if same else 'stale: rerun without --check'}")
        return 0 if same else 1
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
