"""How far to trust a simulated latency: a 90% interval from the step model's held-out errors.

The calibration's own held-out errors (``catalog/data/heldout_errors.csv``, written by
``python scripts/fidelity_intervals.py``): every shared H100 run replayed with its model left out of the
serving fit (leave-one-model-out, docs/data/h100_runfit.json's fold values), per figure the simulated
and the measured value. Split-conformal prediction turns them into an interval: the score of a run is
|log(simulated / measured)|, and with n scores of runs like this one (the same GPU class, and the same
model family where that has enough runs) the k-th smallest, k = ceil((n + 1) x level), bounds the next
run's score with probability at least ``level`` when runs are exchangeable. A simulated figure y then
carries [y e^-q, y e^q]: where the measured value lies, 90 times in 100.

What it covers: the step model's error on a GPU it was calibrated on, as held-out runs showed it. What
it does not: a GPU with no held-out runs (no interval: ``basis`` says so, never a guessed width), and a
figure no run measured (the p99 ITL and TPOT: the shared runs record their means only).
:func:`coverage` checks the claim on the runs themselves, each model held out in turn.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Rows = Sequence[dict[str, Any]]  # held-out errors, one dict of COLUMNS per run and metric

LEVEL = 0.9
FILE = "heldout_errors.csv"
COLUMNS = ("gpu", "family", "model", "run", "metric", "measured", "simulated")
# summary.json figure -> the held-out metric whose errors bound it (ITL and TPOT means: the runs' mean ITL)
FIGURES: dict[tuple[str, str], str] = {
    ("ttft_ms", "mean"): "ttft_mean",
    ("ttft_ms", "p99"): "ttft_p99",
    ("tpot_ms", "mean"): "itl_mean",
    ("itl_ms", "mean"): "itl_mean",
    ("e2e_ms", "mean"): "e2e_mean",
    ("e2e_ms", "p99"): "e2e_p99",
}
UNMEASURED = (("tpot_ms", "p99"), ("itl_ms", "p99"))  # no shared run records them


def family_of(model: Any) -> str:
    """The model family the errors are grouped by: ``moe`` or ``dense``."""
    return "moe" if model.is_moe else "dense"


@cache
def heldout_rows() -> tuple[dict[str, Any], ...]:
    """The shipped held-out errors, one row per run and metric (csv, not pandas: every simulation reads
    them, and a simulation imports no pandas)."""
    with resources.files("distsim.catalog").joinpath("data", FILE).open(encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{FILE}: missing column(s) {', '.join(sorted(missing))}")
        return tuple({**r, "measured": float(r["measured"]), "simulated": float(r["simulated"])} for r in reader)


def heldout_errors() -> pd.DataFrame:
    """:func:`heldout_rows` as a table (for the scripts and tests)."""
    import pandas as pd

    return pd.DataFrame(list(heldout_rows()), columns=list(COLUMNS))


def _rows(table: Rows | pd.DataFrame | None) -> list[dict[str, Any]]:
    if table is None:
        return list(heldout_rows())
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


def scores(rows: Rows) -> np.ndarray:
    """|log(simulated / measured)| per row."""
    return np.array([abs(math.log(r["simulated"] / r["measured"])) for r in rows])


def conformal_quantile(values: Sequence[float], level: float = LEVEL) -> float:
    """The split-conformal bound: the k-th smallest of n scores, k = ceil((n + 1) level); inf when n is
    too small for the level (fewer than level / (1 - level) scores)."""
    s = np.sort(np.asarray(values, dtype=float))
    k = math.ceil((len(s) + 1) * level)
    return float(s[k - 1]) if 1 <= k <= len(s) else math.inf


@dataclass(frozen=True)
class Basis:
    """The held-out runs an interval comes from: their GPU, family (``any``: every family of that GPU),
    and how many runs and models."""

    gpu: str
    family: str
    runs: int
    models: int

    def text(self) -> str:
        fam = "every model family" if self.family == "any" else f"{self.family} models"
        return (f"{self.gpu}, {fam}: {self.runs} runs of {self.models} models held out "
                "(split-conformal on leave-one-model-out errors)")


def basis_rows(table: Rows | pd.DataFrame, gpu: str, family: str, level: float = LEVEL) -> tuple[list[dict[str, Any]], Basis] | None:
    """The rows an interval for (``gpu``, ``family``) is drawn from: that family's runs on that GPU when
    they are enough for ``level`` (at least level / (1 - level) runs), else every family's on that GPU;
    None when the GPU has no held-out runs."""
    on_gpu = [r for r in _rows(table) if r["gpu"] == gpu]
    if not on_gpu:
        return None
    need = math.ceil(level / (1.0 - level) - 1e-9)
    mine = [r for r in on_gpu if r["family"] == family]
    rows, fam = (mine, family) if len({r["run"] for r in mine}) >= need else (on_gpu, "any")
    return rows, Basis(gpu, fam, len({r["run"] for r in rows}), len({r["model"] for r in rows}))


def quantiles(rows: Rows, level: float = LEVEL) -> dict[str, float]:
    """Per held-out metric, the conformal bound of its scores."""
    metrics = sorted({r["metric"] for r in rows})
    return {m: conformal_quantile(scores([r for r in rows if r["metric"] == m]), level) for m in metrics}


def for_pool(gpu: str, family: str, table: Rows | pd.DataFrame | None = None, level: float = LEVEL) -> tuple[dict[str, float], Basis] | None:
    """(bound per metric, basis) for a pool of ``gpu`` serving a ``family`` model, or None."""
    found = basis_rows(_rows(table), gpu, family, level)
    if found is None:
        return None
    rows, basis = found
    return quantiles(rows, level), basis


def summary_section(summary: dict[str, Any], pools: Sequence[tuple[str, str]], level: float = LEVEL) -> dict[str, Any]:
    """summary.json's ``prediction_interval``: each latency figure's interval at ``level`` for a fleet of
    ``pools`` ((GPU, family) each): the widest of its pools' bounds; none when a pool's GPU has no
    held-out runs."""
    bases = [for_pool(gpu, family, level=level) for gpu, family in dict.fromkeys(pools)]
    out: dict[str, Any] = {"level": level}
    if not bases or any(b is None for b in bases):
        missing = sorted({gpu for (gpu, _), b in zip(dict.fromkeys(pools), bases) if b is None})
        out["basis"] = f"no held-out runs on {', '.join(missing)}: no interval (docs/fidelity.md, prediction intervals)"
        return out
    out["basis"] = "; ".join(b.text() for _, b in bases)
    for (figure, stat), metric in FIGURES.items():
        q = max(qs.get(metric, math.inf) for qs, _ in bases)
        value = (summary.get(figure) or {}).get(stat)
        out.setdefault(figure, {})[stat] = interval(value, q)
    for figure, stat in UNMEASURED:
        out.setdefault(figure, {})[stat] = None  # no run measured it: no held-out error
    return out


def interval(value: float | None, q: float, digits: int = 4) -> list[float] | None:
    """[value e^-q, value e^q], rounded as summary.json rounds; None without a value or a finite bound."""
    if value is None or not math.isfinite(q):
        return None
    return [round(value * math.exp(-q), digits), round(value * math.exp(q), digits)]


def coverage(table: Rows | pd.DataFrame | None = None, level: float = LEVEL) -> pd.DataFrame:
    """Each model held out in turn: its runs' figures against the interval drawn from the other models'
    runs (same rule as :func:`for_pool`); one row per held-out run and metric with ``covered``."""
    import pandas as pd

    rows = _rows(table)
    out = []
    for model in sorted({r["model"] for r in rows}):
        rest = [r for r in rows if r["model"] != model]
        held = [r for r in rows if r["model"] == model]
        for gpu, family in sorted({(r["gpu"], r["family"]) for r in held}):
            found = for_pool(gpu, family, rest, level)
            if found is None:
                continue
            qs, basis = found
            for r in (r for r in held if (r["gpu"], r["family"]) == (gpu, family)):
                q = qs.get(r["metric"], math.inf)
                score = abs(math.log(r["simulated"] / r["measured"]))
                out.append((gpu, family, model, r["run"], r["metric"], q, score, score <= q, basis.family))
    return pd.DataFrame(out, columns=["gpu", "family", "model", "run", "metric", "bound", "score", "covered", "basis_family"])
