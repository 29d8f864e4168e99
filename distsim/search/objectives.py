"""What a search optimises: the scalar fitness (``search.objectives: fitness``, the default) or several
objectives at once (a list: NSGA-II with ``search.algorithm=gp``), read per candidate from the runner's
results table and averaged over the training seeds; and the Pareto outputs (pareto.csv, pareto.png).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from distsim.errors import ConfigError

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
        raise ConfigError("search.objectives", f"objectives other than fitness need search.algorithm=gp (NSGA-II), not {algorithm}")
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


def candidate_means(table: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """One row per (generation, candidate) of the candidates table: its overrides and each objective's
    mean over the training seeds (the worst value where a seed failed)."""
    out = []
    for (gen, cand), part in table.groupby(["generation", "candidate"], sort=True):
        rows = part[list(names)].to_dict("records")
        out.append({"generation": gen, "candidate": cand, "overrides": part["overrides"].iloc[0],
                    **dict(zip(names, means(rows, names)))})
    return pd.DataFrame(out)


def front_of(table: pd.DataFrame, names: Sequence[str]) -> pd.Series:
    """Per row of the candidates table: whether its candidate is on the first front of every candidate
    of the search (by mean objectives)."""
    per = candidate_means(table, names)
    on = first_front(per[list(names)].to_numpy(), weights(names))
    keys = set(zip(per["generation"][on], per["candidate"][on]))
    return pd.Series([(g, c) in keys for g, c in zip(table["generation"], table["candidate"])], index=table.index)
