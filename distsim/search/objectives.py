"""What a search optimises: the scalar fitness (``search.objectives: fitness``, the default) or several
objectives at once (a list: NSGA-II with ``search.algorithm=gp``), read per candidate from the runner's
results table; and the Pareto outputs (pareto.csv, pareto.png).

Objectives across scenario families (distsim.search.families). TTFT p99 on a 2 req/s trace and on a
50 req/s prefix-heavy burst differ by orders of magnitude, so a plain mean over families would be the
busiest family alone. Each objective of a candidate is therefore, like the scalar training score, made
relative per family: its mean over the training seeds on that family, minus the reference built-in's
(``search.reference``) mean on the same family and seeds, divided by the reference's; then averaged over
the training families. ``ttft_p99_ms = -0.05`` reads "5% lower TTFT p99 than the reference on the average
family"; the reference itself is 0 on every objective. Minimised objectives stay minimised. A candidate that
failed on any family or seed is the worst value. With ``search.reference: null`` it is the plain mean over
families of the per-family means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from distsim.errors import ConfigError, UserError

# name -> (results column, factor, +1 maximised / -1 minimised)
OBJECTIVES: dict[str, tuple[str, float, float]] = {
    "fitness": ("fitness", 1.0, 1.0),
    "ttft_p99_ms": ("ttft_ms.p99", 1.0, -1.0),
    "tpot_p99_ms": ("tpot_ms.p99", 1.0, -1.0),
    "cost_usd_per_mtok": ("cost_usd_per_1k_tokens", 1000.0, -1.0),  # dollars per million tokens
}
FRONT_METRICS = ("ttft_p99_ms", "tpot_p99_ms", "cost_usd_per_mtok")  # recorded for every candidate
WORST = 1e12  # a failed candidate's value of a minimised objective (a maximised one gets -WORST)


def objectives(node: object, algorithm: str) -> list[str] | None:
    """``search.objectives`` checked: None for the scalar fitness, else the objectives' names."""
    if node is None or node == "fitness":
        return None
    names = [node] if isinstance(node, str) else [str(x) for x in node]
    for name in names:
        if name not in OBJECTIVES:
            raise ConfigError("search.objectives", f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names) or not names:
        raise ConfigError("search.objectives", "must name each objective once (or be: fitness)")
    if algorithm != "gp":
        raise ConfigError("search.objectives", f"objectives other than fitness need search.algorithm=gp (NSGA-II), not {algorithm}: "
            "add search.objectives=fitness")
    return names


def weights(names: Sequence[str] | None) -> tuple[float, ...]:
    return (1.0,) if names is None else tuple(OBJECTIVES[n][2] for n in names)


def _value(row: dict, name: str) -> float:
    column, factor, _ = OBJECTIVES[name]
    value = row.get(column) if row["status"] == "ok" else None
    return float(value) * factor if value is not None and math.isfinite(float(value)) else math.nan


def per_seed(results: pd.DataFrame, configs: list[list[str]], seeds: list[int], names: Sequence[str]) -> list[list[dict[str, float]]]:
    """For each config and seed, {objective: value} (NaN where the job failed or had no value)."""
    by_key = {}
    for row in results.to_dict("records"):
        by_key[(row["config"], int(row["seed"]))] = {n: _value(row, n) for n in names}
    empty = dict.fromkeys(names, math.nan)
    return [[by_key.get((" ".join(c), s), empty) for s in seeds] for c in configs]


def means(rows: list[dict[str, float]], names: Sequence[str]) -> tuple[float, ...]:
    """The mean over seeds of each objective, the worst value where any seed failed."""
    out = []
    for n in names:
        values = [r[n] for r in rows]
        ok = all(math.isfinite(v) for v in values)
        out.append(float(np.mean(values)) if ok else -WORST * OBJECTIVES[n][2])
    return tuple(out)


class _Point:
    """A point with a DEAP fitness, for DEAP's non-dominated sort."""

    def __init__(self, fitness):
        self.fitness = fitness


def first_front(points: np.ndarray, signs: Sequence[float]) -> np.ndarray:
    """Which rows of ``points`` (objective values) no other row dominates, by DEAP's non-dominated sort;
    ``signs``: +1 maximised, -1 minimised per column."""
    from deap import base, tools

    cls = type("FrontFitness", (base.Fitness,), {"weights": tuple(signs)})
    items = []
    for p in points:
        f = cls()
        f.values = tuple(float(x) for x in p)
        items.append(_Point(f))
    front = tools.sortNondominated(items, len(items), first_front_only=True)[0] if items else []
    ids = {id(x) for x in front}
    return np.array([id(x) in ids for x in items], dtype=bool)


def column(name: str) -> str:
    """The candidates table's column of an objective over the training families (one value per candidate)."""
    return f"train_{name}"


def reference_objectives(
    per_family: Mapping[str, list[dict[str, float]]], names: Sequence[str], policy: str
) -> dict[str, tuple[float, ...]]:
    """The reference's mean of each objective per family; one that failed or is 0 cannot normalise."""
    out = {}
    for family, rows in per_family.items():
        values = means(rows, names)
        if not all(math.isfinite(v) and abs(v) < WORST and v != 0 for v in values):
            raise UserError(
                f"search error: the reference policy {policy} has no usable {', '.join(names)} on family "
                f"{family} ({values}): set search.reference to another built-in, or null"
            )
        out[family] = values
    return out


def across_families(
    per_family: Mapping[str, list[dict[str, float]]],
    names: Sequence[str],
    reference: Mapping[str, tuple[float, ...]] | None,
) -> tuple[float, ...]:
    """One candidate's objectives over the training families (module docstring): per family the mean over
    seeds relative to the reference's, averaged over families; the worst value where any run failed."""
    worst = tuple(-WORST * OBJECTIVES[n][2] for n in names)
    per = []
    for family, rows in per_family.items():
        values = means(rows, names)
        if any(abs(v) >= WORST for v in values):
            return worst
        ref = reference[family] if reference is not None else None
        per.append(values if ref is None else tuple((v - r) / abs(r) for v, r in zip(values, ref)))
    return tuple(float(np.mean(col)) for col in zip(*per)) if per else worst


def candidate_points(table: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """One row per (generation, candidate) of the candidates table: its overrides, training score and
    each objective over the training families (columns named by the objectives)."""
    cols = ["generation", "candidate", "overrides", "train_score", *(column(n) for n in names)]
    per = table[cols].drop_duplicates(["generation", "candidate"]).sort_values(["generation", "candidate"])
    return per.rename(columns={column(n): n for n in names}).reset_index(drop=True)


def front_of(table: pd.DataFrame, names: Sequence[str]) -> pd.Series:
    """Per row of the candidates table: whether its candidate is on the first front of every candidate
    of the search (by its objectives over the training families)."""
    per = candidate_points(table, names)
    on = first_front(per[list(names)].to_numpy(), weights(names))
    keys = set(zip(per["generation"][on], per["candidate"][on]))
    return pd.Series([(g, c) in keys for g, c in zip(table["generation"], table["candidate"])], index=table.index)
