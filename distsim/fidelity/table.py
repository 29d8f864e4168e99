"""Comparison tables: plain text for the terminal, Markdown for the docs."""

from __future__ import annotations

import math
from collections.abc import Mapping

from distsim.fidelity.metrics import METRICS, MetricComparison

_LABEL = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}


def metric_label(metric: str) -> str:
    lat, stat = metric.split(".")
    return f"{_LABEL[lat]} {stat} (ms)"


def _num(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.1f}%"


def format_comparison(comparison: Mapping[str, MetricComparison], title: str = "") -> str:
    """A text table: metric, measured, simulated, error."""
    lines = [title] if title else []
    lines.append(f"{'metric':<18}{'measured':>12}{'simulated':>12}{'error':>9}")
    for i, m in enumerate(METRICS):
        if i and i % 5 == 0:
            lines.append("")
        c = comparison[m]
        lines.append(
            f"{metric_label(m):<18}{_num(c.measured):>12}{_num(c.simulated):>12}{_pct(c.error_pct):>9}"
        )
    return "\n".join(lines)


def markdown_table(columns: Mapping[str, Mapping[str, MetricComparison]]) -> str:
    """Measured, then the error of each named simulation (the column heading), one row per metric."""
    names = list(columns)
    head = "| metric | measured | " + " | ".join(names) + " |"
    rule = "|---|---:|" + "---:|" * len(names)
    rows = [head, rule]
    first = columns[names[0]]
    for m in METRICS:
        cells = [_pct(columns[n][m].error_pct) for n in names]
        rows.append(f"| {metric_label(m)} | {_num(first[m].measured)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
