"""What a sweep prints at the end: the ranking as a plain-text table, the failures, where the files are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from distsim.runner import store
from distsim.runner.ranking import Parts, common_overrides
from distsim.runner.rows import retried_jobs

if TYPE_CHECKING:
    from distsim.runner.outcome import SweepOutcome


def _num(x: object, digits: int = 3) -> str:
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


HEAD = ["", "rank", "config", "n", "fitness", "95% CI", "vs best", "p(Holm)", "ttft p99", "tpot p99", "goodput"]
LEGEND = (
    "fitness: mean over seeds with a 95% t-interval; '*' best, '=' not significantly worse than the best "
    "(paired t-test per seed, Holm-adjusted, alpha {alpha}); vs best = mean paired difference; "
    "ttft/tpot p99 in ms and goodput in req/s are means over seeds"
)


def _cells(r: pd.Series, digits: int, max_label: int) -> list[str]:
    """One ranking row as the table's cells."""
    label = str(r["label"])
    label = label if len(label) <= max_label else label[: max_label - 3] + "..."
    rank = "-" if pd.isna(r["rank"]) else str(int(r["rank"]))
    mark = "*" if r["test"] == "best" else ("=" if r["tied_with_best"] and r["n"] > 0 else "")
    return [
        mark,
        rank,
        label,
        str(int(r["n"])) + (f" ({int(r['n_failed'])} failed)" if r["n_failed"] else ""),
        _num(r["fitness_mean"], digits),
        _ci(r["fitness_ci_low"], r["fitness_ci_high"], digits),
        "" if r["test"] == "best" else _num(r["diff_vs_best"], digits),
        "" if r["test"] == "best" else _p(r["p_holm"]),
        _num(r["ttft_ms.p99_mean"], 1),
        _num(r["tpot_ms.p99_mean"], 1),
        _num(r["goodput.requests_per_s_mean"], 2),
    ]


def aligned(rows: list[list[str]], left: frozenset[int] = frozenset({1, 2})) -> list[str]:
    """Rows of cells as lines: the ``left`` columns (rank and config) left-aligned, the others (figures)
    right-aligned, a rule under the head."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def fmt(row: list[str]) -> str:
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    return [fmt(rows[0]), "  ".join("-" * w for w in widths), *(fmt(row) for row in rows[1:])]


def format_ranking(
    ranking: pd.DataFrame, alpha: float = 0.05, max_label: int = 48, parts: Parts | None = None
) -> str:
    """A table of the ranking, best first, with a legend. ``parts``: the configs' overrides, as for
    distsim.runner.ranking.rank_configs."""
    if ranking.empty:
        return "no configurations to rank"
    digits = 3 if ranking["fitness_mean"].abs().max() < 1000 else 1
    lines = aligned([HEAD, *(_cells(r, digits, max_label) for _, r in ranking.iterrows())])
    shared = common_overrides(ranking["config"].tolist(), parts) if len(ranking) > 1 else []
    lines.append("")
    if shared:
        lines.append("common overrides: " + " ".join(shared))
    lines.append(LEGEND.format(alpha=alpha))
    for _, r in ranking.iterrows():
        if isinstance(r.get("not_ranked"), str):
            lines.append(f"not ranked: {r['label']}: {r['not_ranked']}")
    return "\n".join(lines)


def report_text(outcome: SweepOutcome, alpha: float = 0.05) -> str:
    """The ranking, the failures and where the files are: what a sweep prints at the end."""
    lines = [format_ranking(outcome.ranking, alpha, parts=outcome.parts), ""]
    status = f"{outcome.ok} of {outcome.total} jobs ok"
    if outcome.resumed:
        status += f" ({outcome.resumed} resumed from an earlier run)"
    if outcome.failed:
        status += f"; {outcome.failed} FAILED (see the error column of results.parquet)"
        for _, row in outcome.results[outcome.results["status"] != "ok"].head(5).iterrows():
            lines.append(f"  job {row['job']} [{row['overrides']}]: {row['error']}")
        if outcome.failed > 5:
            lines.append(f"  ... and {outcome.failed - 5} more")
    retried = retried_jobs(outcome.results)
    if retried:
        each = ", ".join(f"job {job} ({n} attempts)" for job, n in sorted(retried.items()))
        status += f"; retried after their worker died or hung: {each}"
    lines.append(f"{status}; {outcome.wall_s:.1f} s")
    lines.append(
        f"results: {outcome.sweep_dir / store.RESULTS_FILE}  ranking: {outcome.sweep_dir / store.RANKING_FILE}"
    )
    return "\n".join(lines)
