"""Rank configurations by fitness with confidence intervals and a paired test against the winner.

Every configuration of a sweep sees the same workload for the same seed (the request stream is drawn
from the seed and the name "workload" only), so seed-to-seed noise is largely shared. Comparing each
configuration with the best one seed by seed (the differences d_s = fitness(config, s) - fitness(best, s))
cancels that shared noise and is far more sensitive than comparing two independent means.

- Per configuration: n, mean fitness, and a 95% CI from the t distribution (mean +- t(0.975, n-1) s/sqrt(n)).
- The best configuration is the one with the highest mean fitness (ties: the first config in sort order).
- Every other configuration: a two-sided paired t-test of mean(d) = 0 over the seeds both have. With fewer
  than two shared seeds it falls back to Welch's unpaired t-test, and with fewer than two runs per side no
  test is possible. The p-values are Holm-adjusted over the k-1 comparisons, so the chance of wrongly
  calling any configuration worse than the winner stays at alpha.
- tied_with_best: the winner itself, and every configuration not significantly worse at alpha (including
  those that cannot be tested): the data cannot tell them apart from the winner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

METRIC = "fitness"
NOT_MEASURED = "capacity.not_measured"  # results.parquet's column: why a capacity run has no fitness
KEY_FIGURES = ("ttft_ms.p99", "tpot_ms.p99", "e2e_ms.p99", "goodput.requests_per_s", "goodput.slo_attainment")


@dataclass(frozen=True)
class Comparison:
    n: int
    diff_mean: float
    diff_low: float
    diff_high: float
    p_value: float
    test: str  # paired-t | welch-t | none


def mean_ci(values: np.ndarray, alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean, low, high) of a t-interval; low = high = mean for a single value with no spread known."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(values.mean())
    if n == 1:
        return (mean, math.nan, math.nan)
    half = float(stats.t.ppf(1 - alpha / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return (mean, mean - half, mean + half)


def _t_p(diffs: np.ndarray) -> float:
    """Two-sided one-sample t-test p-value of mean(diffs) = 0, defined for zero spread too."""
    sd = diffs.std(ddof=1)
    if sd == 0:
        return 1.0 if diffs.mean() == 0 else 0.0
    t = diffs.mean() / (sd / math.sqrt(len(diffs)))
    return float(2 * stats.t.sf(abs(t), len(diffs) - 1))


def compare(best: pd.Series, other: pd.Series, alpha: float = 0.05) -> Comparison:
    """``other`` against ``best``; both are fitness indexed by seed."""
    shared = best.index.intersection(other.index)
    if len(shared) >= 2:
        diffs = (other.loc[shared] - best.loc[shared]).to_numpy(dtype=float)
        mean, low, high = mean_ci(diffs, alpha)
        return Comparison(len(shared), mean, low, high, _t_p(diffs), "paired-t")
    diff = float(other.mean() - best.mean())
    if len(best) >= 2 and len(other) >= 2:
        res = stats.ttest_ind(other.to_numpy(float), best.to_numpy(float), equal_var=False)
        p = float(res.pvalue) if np.isfinite(res.pvalue) else (1.0 if diff == 0 else 0.0)
        return Comparison(0, diff, math.nan, math.nan, p, "welch-t")
    return Comparison(len(shared), diff, math.nan, math.nan, math.nan, "none")


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and does not count as a test)."""
    idx = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: p_values[i])
    m = len(order)
    out = list(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


Parts = Mapping[str, Sequence[str]]  # config key -> the texts of its overrides


def config_parts(configs: Sequence[str], parts: Parts | None = None) -> dict[str, tuple[str, ...]]:
    """Each config's overrides. The sweep driver passes them from its plan (typed pairs, so a value that
    holds a space stays one override); a table read back from disk (distsim.report) has only the config
    column, the texts joined by spaces, and is split on them."""
    return {c: tuple(parts[c]) if parts is not None and c in parts else tuple(c.split()) for c in configs}


def common_overrides(configs: list[str], parts: Parts | None = None) -> list[str]:
    """Overrides present in every config (shown once, not on every row)."""
    if not configs:
        return []
    split = config_parts(configs, parts)
    shared = set.intersection(*(set(p) for p in split.values()))
    return [o for o in split[configs[0]] if o in shared]


def labels(configs: list[str], parts: Parts | None = None) -> dict[str, str]:
    """Each config without the overrides all of them share; "(defaults)" when nothing is left."""
    split = config_parts(configs, parts)
    shared = set(common_overrides(configs, parts)) if len(configs) > 1 else set()
    return {c: (" ".join(o for o in split[c] if o not in shared) or "(defaults)") for c in configs}


def not_measured(results: pd.DataFrame) -> dict[str, str]:
    """The configurations with a job that ran but measured no fitness (a capacity with no request in the
    measurement window), with why: a mean over the other seeds would compare a different set of seeds, and
    a null is not a zero, so such a configuration is not ranked at all."""
    if not len(results):
        return {}
    blank = results[(results["status"] == "ok") & results[METRIC].isna()]
    why = results.get(NOT_MEASURED, pd.Series(index=results.index, dtype=object))
    out = {}
    for config, group in blank.groupby("config", sort=True):
        reasons = sorted({str(r) for r in why[group.index].dropna()}) or ["its fitness is null"]
        total = int(((results["config"] == config) & (results["status"] == "ok")).sum())
        out[config] = f"fitness not measured in {len(group)} of {total} jobs: {'; '.join(reasons)}"
    return out


def _per_seed(group: pd.DataFrame) -> pd.Series:
    return group.groupby("seed")[METRIC].mean()


def _config_row(config: str, label: str, group: pd.DataFrame, all_rows: pd.DataFrame, alpha: float) -> dict:
    """The figures of one config: ``group`` its successful jobs, ``all_rows`` all of them."""
    mean, low, high = mean_ci(group[METRIC].to_numpy(float), alpha)
    policies = all_rows["policy"].dropna().unique()
    row = {
        "config": config,
        "label": label,
        "policy": policies[0] if len(policies) else None,
        "n": len(group),
        "n_failed": int((all_rows["status"] != "ok").sum()),
        "fitness_mean": mean,
        "fitness_std": float(group[METRIC].std(ddof=1)) if len(group) > 1 else math.nan,
        "fitness_ci_low": low,
        "fitness_ci_high": high,
    }
    for key in KEY_FIGURES:
        row[f"{key}_mean"] = float(group[key].mean()) if key in group and len(group) else math.nan
    return row


def _compare_all(
    table: pd.DataFrame, ok: pd.DataFrame, alpha: float
) -> tuple[str | None, dict[str, Comparison]]:
    """The best config and every other config (with results) compared with it."""
    ranked = table[table["n"] > 0].sort_values(["fitness_mean", "config"], ascending=[False, True])
    best = ranked["config"].iloc[0] if len(ranked) else None
    comparisons: dict[str, Comparison] = {}
    if best is not None:
        best_series = _per_seed(ok[ok["config"] == best])
        for config in ranked["config"]:
            if config != best:
                comparisons[config] = compare(best_series, _per_seed(ok[ok["config"] == config]), alpha)
    return best, comparisons


def _add_tests(
    table: pd.DataFrame, best: str | None, comparisons: dict[str, Comparison], alpha: float
) -> None:
    """Fill the rank and the comparison columns of ``table`` in place."""
    adjusted = dict(zip(comparisons, holm([c.p_value for c in comparisons.values()])))
    table["rank"] = table["fitness_mean"].rank(ascending=False, method="min").astype("Int64")
    table["tied_with_best"] = False
    for name, default in (
        ("n_paired", 0),
        ("diff_vs_best", 0.0),
        ("diff_ci_low", math.nan),
        ("diff_ci_high", math.nan),
    ):
        table[name] = default
    table["p_value"] = math.nan
    table["p_holm"] = math.nan
    table["test"] = ""
    for i, config in table["config"].items():
        if config == best:
            table.loc[i, ["tied_with_best", "test", "n_paired"]] = [True, "best", table.loc[i, "n"]]
            continue
        comp = comparisons.get(config)
        if comp is None:
            table.loc[i, "diff_vs_best"] = math.nan
            continue
        p_adj = adjusted[config]
        worse = not math.isnan(p_adj) and p_adj < alpha and comp.diff_mean < 0
        table.loc[
            i, ["n_paired", "diff_vs_best", "diff_ci_low", "diff_ci_high", "p_value", "p_holm", "test"]
        ] = [comp.n, comp.diff_mean, comp.diff_low, comp.diff_high, comp.p_value, p_adj, comp.test]
        table.loc[i, "tied_with_best"] = not worse
    table["n_paired"] = table["n_paired"].astype(int)


def rank_configs(results: pd.DataFrame, alpha: float = 0.05, parts: Parts | None = None) -> pd.DataFrame:
    """One row per config of ``results`` (the results.parquet table), best first. ``parts`` are the
    configs' overrides (see :func:`config_parts`), which the labels leave out when all configs share them."""
    if METRIC not in results:  # every job failed: no figures at all
        results = results.assign(**{METRIC: math.nan})
    configs = sorted(results["config"].unique().tolist()) if len(results) else []
    names = labels(configs, parts)
    unmeasured = not_measured(results)
    ok = results[(results["status"] == "ok") & ~results["config"].isin(unmeasured)] if len(results) else results
    rows = [
        _config_row(c, names[c], ok[ok["config"] == c], results[results["config"] == c], alpha)
        for c in configs
    ]
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["not_ranked"] = [unmeasured.get(c) for c in configs]
    best, comparisons = _compare_all(table, ok, alpha)
    _add_tests(table, best, comparisons, alpha)
    table = table.sort_values(["rank", "config"], na_position="last", kind="stable").reset_index(drop=True)
    lead = ["config", "n", "fitness_mean", "fitness_ci_low", "fitness_ci_high", "rank", "tied_with_best"]
    return table[lead + [c for c in table.columns if c not in lead]]
