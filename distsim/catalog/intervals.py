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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

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
def heldout_errors() -> pd.DataFrame:
    """The shipped held-out errors (one row per run and metric)."""
    with resources.files("distsim.catalog").joinpath("data", FILE).open(encoding="utf-8") as fh:
        table = pd.read_csv(fh, dtype={"run": str})
    missing = set(COLUMNS) - set(table.columns)
    if missing:
        raise ValueError(f"{FILE}: missing column(s) {', '.join(sorted(missing))}")
    return table


def scores(table: pd.DataFrame) -> pd.Series:
    """|log(simulated / measured)| per row."""
    return np.abs(np.log(table["simulated"] / table["measured"]))


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


def basis_rows(table: pd.DataFrame, gpu: str, family: str, level: float = LEVEL) -> tuple[pd.DataFrame, Basis] | None:
    """The rows an interval for (``gpu``, ``family``) is drawn from: that family's runs on that GPU when
    they are enough for ``level`` (at least level / (1 - level) runs), else every family's on that GPU;
    None when the GPU has no held-out runs."""
    on_gpu = table[table["gpu"] == gpu]
    if on_gpu.empty:
        return None
    need = math.ceil(level / (1.0 - level) - 1e-9)
    mine = on_gpu[on_gpu["family"] == family]
    rows, fam = (mine, family) if mine["run"].nunique() >= need else (on_gpu, "any")
    return rows, Basis(gpu, fam, int(rows["run"].nunique()), int(rows["model"].nunique()))


def quantiles(rows: pd.DataFrame, level: float = LEVEL) -> dict[str, float]:
    """Per held-out metric, the conformal bound of its scores."""
    return {str(m): conformal_quantile(scores(part), level) for m, part in rows.groupby("metric")}


def for_pool(gpu: str, family: str, table: pd.DataFrame | None = None, level: float = LEVEL) -> tuple[dict[str, float], Basis] | None:
    """(bound per metric, basis) for a pool of ``gpu`` serving a ``family`` model, or None."""
    table = heldout_errors() if table is None else table
    found = basis_rows(table, gpu, family, level)
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


def coverage(table: pd.DataFrame | None = None, level: float = LEVEL) -> pd.DataFrame:
    """Each model held out in turn: its runs' figures against the interval drawn from the other models'
    runs (same rule as :func:`for_pool`); one row per held-out run and metric with ``covered``."""
    table = heldout_errors() if table is None else table
    rows = []
    for model, held in table.groupby("model", sort=True):
        rest = table[table["model"] != model]
        for (gpu, family), part in held.groupby(["gpu", "family"]):
            found = for_pool(str(gpu), str(family), rest, level)
            if found is None:
                continue
            qs, basis = found
            for r in part.itertuples(index=False):
                q = qs.get(r.metric, math.inf)
                score = abs(math.log(r.simulated / r.measured))
                rows.append((r.gpu, r.family, model, r.run, r.metric, q, score, score <= q, basis.family))
    return pd.DataFrame(rows, columns=["gpu", "family", "model", "run", "metric", "bound", "score", "covered", "basis_family"])
