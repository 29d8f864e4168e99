"""What a sweep prints at the end: the ranking as a plain-text table, the failures, where the files are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from distsim.runner import store
from distsim.runner.ranking import common_overrides

if TYPE_CHECKING:
    from distsim.runner.sweep import SweepOutcome


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return "-"
    return f"{x:,.{digits}f}"


def _ci(low: float, high: float, digits: int) -> str:
    if math.isnan(low) or math.isnan(high):
        return "-"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def _p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def format_ranking(ranking: pd.DataFrame, alpha: float = 0.05, max_label: int = 48) -> str:
    """A table of the ranking, best first, with a legend."""
    if ranking.empty:
        return "no configurations to rank"
    digits = 3 if ranking["fitness_mean"].abs().max() < 1000 else 1
    head = [
        "",
        "rank",
        "config",
        "n",
        "fitness",
        "95% CI",
        "vs best",
        "p(Holm)",
        "ttft p99",
        "tpot p99",
        "goodput",
    ]
    body = []
    for _, r in ranking.iterrows():
        label = str(r["label"])
        label = label if len(label) <= max_label else label[: max_label - 3] + "..."
        rank = "-" if pd.isna(r["rank"]) else str(int(r["rank"]))
        mark = "*" if r["test"] == "best" else ("=" if r["tied_with_best"] and r["n"] > 0 else "")
        diff = "" if r["test"] == "best" else _num(r["diff_vs_best"], digits)
        body.append(
            [
                mark,
                rank,
                label,
                str(int(r["n"])) + (f" ({int(r['n_failed'])} failed)" if r["n_failed"] else ""),
                _num(r["fitness_mean"], digits),
                _ci(r["fitness_ci_low"], r["fitness_ci_high"], digits),
                diff,
                "" if r["test"] == "best" else _p(r["p_holm"]),
                _num(r["ttft_ms.p99_mean"], 1),
                _num(r["tpot_ms.p99_mean"], 1),
                _num(r["goodput.requests_per_s_mean"], 2),
            ]
        )
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    left = {1, 2}

    def fmt(row: list[str]) -> str:
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    lines += [fmt(row) for row in body]
    shared = common_overrides(ranking["config"].tolist()) if len(ranking) > 1 else []
    lines.append("")
    if shared:
        lines.append("common overrides: " + " ".join(shared))
    lines.append(
        f"fitness: mean over seeds with a 95% t-interval; '*' best, '=' not significantly worse than the best "
        f"(paired t-test per seed, Holm-adjusted, alpha {alpha}); vs best = mean paired difference; "
        "ttft/tpot p99 in ms and goodput in req/s are means over seeds"
    )
    return "\n".join(lines)


def report_text(outcome: SweepOutcome, alpha: float = 0.05) -> str:
    """The ranking, the failures and where the files are: what a sweep prints at the end."""
    lines = [format_ranking(outcome.ranking, alpha), ""]
    status = f"{outcome.ok} of {outcome.total} jobs ok"
    if outcome.resumed:
        status += f" ({outcome.resumed} resumed from an earlier run)"
    if outcome.failed:
        status += f"; {outcome.failed} FAILED (see the error column of results.parquet)"
        for _, row in outcome.results[outcome.results["status"] != "ok"].head(5).iterrows():
            lines.append(f"  job {row['job']} [{row['overrides']}]: {row['error']}")
        if outcome.failed > 5:
            lines.append(f"  ... and {outcome.failed - 5} more")
    lines.append(f"{status}; {outcome.wall_s:.1f} s")
    lines.append(
        f"results: {outcome.sweep_dir / store.RESULTS_FILE}  ranking: {outcome.sweep_dir / store.RANKING_FILE}"
    )
    return "\n".join(lines)
