"""``python -m distsim.report SWEEP_DIR``: plots and a markdown summary of a finished sweep.

Reads results.parquet (and ranking.csv, or ranks again) and each job's requests.parquet, and writes into
SWEEP_DIR/report/: fitness.png (mean fitness per configuration with its 95% CI, the winner and the
configurations tied with it marked), latency_cdf.png (TTFT, TPOT and E2E distributions per configuration,
pooled over its seeds; the best-ranked eight when there are more), param_<key>.png for every swept numeric
parameter (fitness and p99 TTFT against it, one line per setting of the other swept keys; a latency's CI
band is clipped at zero, where a t-interval over few seeds can reach), and report.md tying them together.
It opens with how much of the planned sweep ran (sweep.json): an interrupted sweep, the jobs and
configurations that never ran, and jobs retried after their worker died or hung are named.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402

from distsim import outputs  # noqa: E402
from distsim.errors import InputFileError, UserError  # noqa: E402
from distsim.runner import store  # noqa: E402
from distsim.runner.ranking import mean_ci, rank_configs  # noqa: E402
from distsim.runner.rows import PARAM_PREFIX, retried_jobs  # noqa: E402

LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))
MAX_CDF_LINES = 8
REQUESTS_FILE = "requests.parquet"
COLORS = {"best": "#1b7837", "tied": "#5aae61", "worse": "#b2182b"}


RESULTS_COLUMNS = ("job", "overrides", "config", "policy", "status", "error")
RANKING_COLUMNS = ("config", "label", "n", "fitness_mean", "fitness_ci_low", "fitness_ci_high", "rank", "test")


def _read_table(path: Path, read: Callable[[Path], pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    """A table the sweep wrote, or InputFileError naming it when it is unreadable or lacks a column."""
    try:
        table = read(path)
    except (OSError, ValueError, pa.ArrowException) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputFileError(path, f"unreadable ({first})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputFileError(path, f"not a sweep's table: no column {', '.join(missing)}")
    return table


def load(sweep_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    path = sweep_dir / store.RESULTS_FILE
    if not path.exists():
        raise UserError(f"report: {path} not found (is {sweep_dir} a finished sweep directory?)")
    results = _read_table(path, pd.read_parquet, RESULTS_COLUMNS)
    ranking_path = sweep_dir / store.RANKING_FILE
    if ranking_path.exists():
        ranking = _read_table(ranking_path, pd.read_csv, RANKING_COLUMNS)
    else:
        ranking = rank_configs(results)
    return results, ranking


def plot_fitness(ranking: pd.DataFrame, path: Path) -> None:
    ranked = ranking[ranking["n"] > 0].iloc[::-1]  # best at the top
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(ranked)))
    y = np.arange(len(ranked))
    for i, (_, r) in zip(y, ranked.iterrows()):
        kind = "best" if r["test"] == "best" else ("tied" if r["tied_with_best"] else "worse")
        low, high = r["fitness_ci_low"], r["fitness_ci_high"]
        err = None if pd.isna(low) else [[r["fitness_mean"] - low], [high - r["fitness_mean"]]]
        ax.errorbar(r["fitness_mean"], i, xerr=err, fmt="o", color=COLORS[kind], capsize=4, label=kind)
    ax.set_yticks(y, [f"{r['label']}  (n={int(r['n'])})" for _, r in ranked.iterrows()])
    ax.set_xlabel("fitness (mean over seeds, 95% CI)")
    ax.set_title("Fitness per configuration")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    names = {"best": "best", "tied": "tied with best (paired test)", "worse": "worse than best"}
    ax.legend(
        [unique[k] for k in names if k in unique],
        [names[k] for k in names if k in unique],
        loc="best",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)


def _job_latencies(sweep_dir: Path, jobs: Sequence[int], missing: list[int]) -> pd.DataFrame:
    """The completed requests of ``jobs``; jobs without a requests.parquet are added to ``missing``."""
    frames = []
    columns = ["status", *(k for k, _ in LATENCIES)]
    for job in jobs:
        path = store.job_dir(sweep_dir, int(job)) / REQUESTS_FILE
        if not path.exists():
            missing.append(int(job))
            continue
        frame = _read_table(path, lambda p: pd.read_parquet(p, columns=columns), columns)
        frames.append(frame[frame["status"] == "completed"])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def cdf_groups(results: pd.DataFrame, ranking: pd.DataFrame) -> tuple[pd.Series, int]:
    """One CDF line per configuration, never pooling configurations that differ in anything but the seed
    (two loads under one policy are two curves). With more configurations than MAX_CDF_LINES, the best
    ranked ones are drawn; returns the ok jobs' line labels (jobs of configurations not drawn left out)
    and how many configurations were left out."""
    ok = results[results["status"] == "ok"]
    ranked = [c for c in ranking.sort_values("rank", na_position="last", kind="stable")["config"] if c in set(ok["config"])]
    drawn = ranked[:MAX_CDF_LINES]
    labels = dict(zip(ranking["config"], ranking["label"]))
    shown = ok[ok["config"].isin(drawn)]
    order = {c: i for i, c in enumerate(drawn)}
    keys = shown["config"].map(lambda c: f"{order[c]:03d} {labels.get(c, c)}")  # rank order, then the label
    return keys, len(ranked) - len(drawn)


def plot_cdfs(
    sweep_dir: Path, results: pd.DataFrame, ranking: pd.DataFrame, path: Path, missing: list[int]
) -> list[str]:
    """Latency CDFs, one per configuration pooled over its jobs; returns the lines drawn (none: no file
    written).

    Ok jobs without a requests.parquet (sim.write_requests=false, or deleted) are added to ``missing``."""
    ok = results[results["status"] == "ok"]
    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(13, 3.8))
    drawn = []
    probs = np.linspace(0, 1, 501)
    keys, left_out = cdf_groups(results, ranking)
    for key_label, group in ok.loc[keys.index].groupby(keys, sort=True):
        label = key_label.split(" ", 1)[1]
        lat = _job_latencies(sweep_dir, group["job"].tolist(), missing)
        if lat.empty:
            continue
        drawn.append(label)
        for ax, (key, _) in zip(axes, LATENCIES):
            values = lat[key].dropna().to_numpy(float)
            if len(values):
                ax.plot(np.quantile(values, probs), probs, label=f"{label} ({len(group)} jobs)")
    if left_out:
        fig.suptitle(f"the {len(drawn)} best-ranked configurations; {left_out} more not drawn", fontsize=9)
    for ax, (_, name) in zip(axes, LATENCIES):
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of completed requests")
        ax.set_title(f"{name} CDF")
        ax.grid(alpha=0.3)
        lines = ax.get_lines()
        if lines:
            xs = np.concatenate([ln.get_xdata() for ln in lines])
            xs = xs[xs > 0]
            if len(xs) and xs.max() / xs.min() > 100:
                ax.set_xscale("log")
    if drawn:
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)
    return drawn


def numeric_params(results: pd.DataFrame) -> list[str]:
    """Swept parameters (param.* columns) with at least two distinct numeric values."""
    out = []
    for col in results.columns:
        if col.startswith(PARAM_PREFIX):
            values = pd.to_numeric(results[col], errors="coerce")
            if values.notna().all() and values.nunique() > 1:
                out.append(col)
    return out


def band(group: pd.DataFrame, param: str, metric: str, floor: float) -> tuple[list, list, list, list]:
    """Per value of ``param``: the mean of ``metric`` over its jobs and its 95% t-interval, never below
    ``floor`` (a latency's interval over few seeds can reach below zero, which no latency can)."""
    xs, means, lows, highs = [], [], [], []
    for x, at in group.groupby(param, sort=True):
        mean, low, high = mean_ci(at[metric].dropna().to_numpy(float))
        xs.append(x)
        means.append(mean)
        lows.append(mean if math.isnan(low) else max(low, floor))
        highs.append(mean if math.isnan(high) else high)
    return xs, means, lows, highs


def plot_param(results: pd.DataFrame, param: str, path: Path) -> None:
    ok = results[results["status"] == "ok"].copy()
    ok[param] = pd.to_numeric(ok[param])
    others = [
        c for c in results.columns if c.startswith(PARAM_PREFIX) and c != param and results[c].nunique() > 1
    ]
    ok["_series"] = (
        [
            " ".join(f"{c[len(PARAM_PREFIX) :]}={v}" for c, v in zip(others, vals))
            for vals in ok[others].itertuples(index=False)
        ]
        if others
        else "all"
    )
    # (metric, axis label, the least value it can take: a CI band never reaches below it)
    metrics = [("fitness", "fitness", -math.inf), ("ttft_ms.p99", "p99 TTFT (ms)", 0.0)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(11, 3.8))
    for ax, (metric, label, floor) in zip(axes, metrics):
        if metric not in ok:
            continue
        for series, group in ok.groupby("_series", sort=True):
            xs, means, lows, highs = band(group, param, metric, floor)
            ax.plot(xs, means, marker="o", label=series)
            ax.fill_between(xs, lows, highs, alpha=0.2)
        ax.set_xlabel(param[len(PARAM_PREFIX) :])
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Metrics against {param[len(PARAM_PREFIX) :]} (mean over seeds, 95% CI band; latency's clipped at 0)")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)


def _fmt(x: object, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def job_list(jobs: Sequence[int], limit: int = 12) -> str:
    """"3, 5, 8" or "0, 1, ... and 40 more"."""
    jobs = sorted(jobs)
    shown = ", ".join(str(j) for j in jobs[:limit])
    return shown + (f" and {len(jobs) - limit} more" if len(jobs) > limit else "")


def missing_note(missing: Sequence[int], ok: int, drawn: bool) -> str:
    """What the latency CDFs lack, in one line (empty when nothing is missing)."""
    if not missing:
        return ""
    what = "latency_cdf.png leaves them out" if drawn else "latency_cdf.png is not drawn"
    return (
        f"{len(missing)} of {ok} ok jobs have no {REQUESTS_FILE} (run with sim.write_requests=false, or "
        f"removed): jobs {job_list(missing)}; {what}"
    )


def read_meta(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json (what was planned, whether the sweep was interrupted, what was retried); empty when
    absent or unreadable, as for a directory written before it existed: the report then counts rows only."""
    try:
        meta = json.loads((sweep_dir / store.SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def counted(n: int, noun: str) -> str:
    """ "1 job", "3 jobs"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def completeness(results: pd.DataFrame, ranking: pd.DataFrame, meta: dict[str, Any]) -> list[str]:
    """The report's opening lines: how much of the planned sweep ran, and what did not or ran twice."""
    ok = int((results["status"] == "ok").sum())
    ran_configs = ranking["config"].nunique()
    planned_jobs = int(meta.get("jobs", len(results)))
    planned_configs = int(meta.get("configs", ran_configs))
    counts = f"{ok} ok, {len(results) - ok} failed"
    if planned_jobs == len(results) and planned_configs == ran_configs:
        lines = [f"{counted(len(results), 'job')}, {counts}, {counted(ran_configs, 'configuration')}."]
    else:
        lines = [f"{len(results)} of {planned_jobs} planned jobs ran ({counts}); "
                 f"{ran_configs} of {planned_configs} configurations."]
    not_run, configs_not_run = meta.get("jobs_not_run") or [], meta.get("configs_not_run") or []
    if meta.get("interrupted") or not_run:
        what = "The sweep was interrupted" if meta.get("interrupted") else "The sweep did not finish"
        text = f"**{what}:** {counted(planned_jobs - len(results), 'job')} never ran"
        text += f" (jobs {job_list(not_run)})" if not_run else ""
        if configs_not_run:
            shown = ", ".join(f"`{c}`" for c in configs_not_run[:MAX_CDF_LINES])
            more = f" and {len(configs_not_run) - MAX_CDF_LINES} more" if len(configs_not_run) > MAX_CDF_LINES else ""
            text += f", and {len(configs_not_run)} of {planned_configs} configurations have no job: {shown}{more}"
        lines += ["", text + ". Run the same sweep command again to resume it."]
    retried = {int(job): int(n) for job, n in (meta.get("retried") or {}).items()} or retried_jobs(results)
    if retried:
        each = ", ".join(f"job {job} ({n} attempts)" for job, n in sorted(retried.items()))
        lines += ["", f"**Retried** after their worker died or hung: {each}."]
    return lines


def markdown(
    sweep_dir: Path, results: pd.DataFrame, ranking: pd.DataFrame, images: list[str], note: str = "",
    meta: dict[str, Any] | None = None,
) -> str:
    lines = [
        f"# Sweep report: {sweep_dir.name}",
        "",
        *completeness(results, ranking, meta or {}),
        "",
        *([f"**Latency CDFs:** {note}.", ""] if note else []),
        "## Ranking",
        "",
        "Fitness is the mean over seeds with a 95% t-interval. Each configuration is compared with the best one "
        "seed by seed (paired t-test on the per-seed differences, Holm-adjusted); *tied* means not significantly "
        "worse than the best at the 5% level.",
        "",
        "| rank | config | n | fitness | 95% CI | vs best | p (Holm) | tied | p99 TTFT ms | p99 TPOT ms | goodput req/s |",
        "|---:|---|---:|---:|---|---:|---:|:---:|---:|---:|---:|",
    ]
    for _, r in ranking.iterrows():
        ci = (
            "-"
            if pd.isna(r["fitness_ci_low"])
            else f"[{r['fitness_ci_low']:.3f}, {r['fitness_ci_high']:.3f}]"
        )
        rank = "-" if pd.isna(r["rank"]) else str(int(r["rank"]))
        best = r["test"] == "best"
        lines.append(
            f"| {rank} | `{r['label']}` | {int(r['n'])} | {_fmt(r['fitness_mean'])} | {ci} | "
            f"{'' if best else _fmt(r['diff_vs_best'])} | {'' if best else _fmt(r['p_holm'])} | "
            f"{'best' if best else ('yes' if r['tied_with_best'] and r['n'] > 0 else 'no')} | "
            f"{_fmt(r['ttft_ms.p99_mean'], 1)} | {_fmt(r['tpot_ms.p99_mean'], 1)} | {_fmt(r['goodput.requests_per_s_mean'], 2)} |"
        )
    lines.append("")
    for image in images:
        lines += [f"![{image}]({image})", ""]
    failed = results[results["status"] != "ok"]
    if len(failed):
        lines += ["## Failed jobs", ""]
        lines += [f"- job {r['job']} `{r['overrides']}`: {r['error']}" for _, r in failed.iterrows()]
        lines.append("")
    return "\n".join(lines)


def build(sweep_dir: Path, out_dir: Path | None = None) -> Path:
    """Write the report; returns the path of report.md. Raises UserError (unreadable inputs, an
    unwritable output directory); warns on stderr when jobs lack their requests.parquet."""
    results, ranking = load(sweep_dir)
    out = outputs.prepare_dir(out_dir or sweep_dir / "report")
    outputs.remove([out / "fitness.png", out / "latency_cdf.png"])  # an earlier report's, if not redrawn
    images, missing, drawn = [], [], False
    if (ranking["n"] > 0).any():
        plot_fitness(ranking, out / "fitness.png")
        images.append("fitness.png")
        drawn = bool(plot_cdfs(sweep_dir, results, ranking, out / "latency_cdf.png", missing))
        if drawn:
            images.append("latency_cdf.png")
    for param in numeric_params(results):
        name = f"param_{param[len(PARAM_PREFIX) :]}.png"
        plot_param(results, param, out / name)
        images.append(name)
    note = missing_note(missing, int((results["status"] == "ok").sum()), drawn)
    if note:
        print(f"distsim.report: warning: {note}", file=sys.stderr)
    meta = read_meta(sweep_dir)
    if meta.get("interrupted"):
        print(f"distsim.report: warning: the sweep was interrupted: {len(results)} of {meta.get('jobs', '?')} "
              "jobs ran; report.md lists those that did not", file=sys.stderr)
    path = out / "report.md"
    outputs.write_text(path, markdown(sweep_dir, results, ranking, images, note, meta))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distsim.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a sweep directory (holds results.parquet)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: SWEEP_DIR/report)")
    args = parser.parse_args(argv)
    try:
        path = build(args.sweep_dir, args.out)
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim.report", main)  # a full or closed stdout, and Ctrl-C, as one line
