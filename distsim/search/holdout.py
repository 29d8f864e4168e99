"""The held-out table: the evolved policy against every built-in, family by family.

Every policy runs on every held-out family and seed, as one sweep (holdout_<digest>/, the digest of the
policy file and the jobs, so a rerun whose best or families changed never resumes older results). Per
family, the evolved policy is compared with each built-in seed by seed (every policy sees the same
requests for a seed): the mean paired difference with its 95% t-interval and a two-sided paired t-test
(distsim.runner.ranking.compare), the p-values Holm-adjusted over the family's built-ins (so the chance
of any false "better" or "worse" in a family stays at alpha), and the relative difference
(evolved - built-in) / |built-in|. The best built-in of a family is the one with the highest mean.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from distsim import outputs
from distsim.runner.ranking import compare, holm, mean_ci
from distsim.runner.table import aligned
from distsim.search.families import Family

FIGURES = {"ttft_p99_ms": "ttft_ms.p99", "tpot_p99_ms": "tpot_ms.p99"}  # column: results column


def plan(
    families: Sequence[Family], base: Sequence[str], policies: Sequence[tuple[str, list[str]]]
) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Every policy ((name, overrides)) on every family: the configs, and (family, policy) of each."""
    configs, keys = [], []
    for family in families:
        for name, overrides in policies:
            configs.append(family.config(base, overrides))
            keys.append((family.name, name))
    return configs, keys


def sweep_name(policy_file: bytes, configs: list[list[str]], seeds: list[int]) -> str:
    text = "\n".join(" ".join(c) for c in configs) + f"\nseeds {seeds}"
    return "holdout_" + hashlib.sha256(policy_file + text.encode()).hexdigest()[:12]


def _per_seed(results: pd.DataFrame, config: str, column: str = "fitness") -> pd.Series:
    ok = results[(results["config"] == config) & (results["status"] == "ok")]
    if column not in ok:
        return pd.Series(dtype=float)
    return ok.groupby("seed")[column].mean().dropna()


def _policy_row(family: str, policy: str, evolved: bool, results: pd.DataFrame, config: str) -> dict:
    fit = _per_seed(results, config)
    mean, low, high = mean_ci(fit.to_numpy(float))
    row = {
        "family": family,
        "policy": policy,
        "evolved": evolved,
        "n": len(fit),
        "fitness_mean": mean,
        "fitness_ci_low": low,
        "fitness_ci_high": high,
    }
    for name, column in FIGURES.items():
        values = _per_seed(results, config, column)
        row[name] = float(values.mean()) if len(values) else math.nan
    return row


def _family_rows(family: str, evolved: str, results: pd.DataFrame, configs: dict[str, str], alpha: float) -> list[dict]:
    """The rows of one family: the evolved policy first, then each built-in compared with it."""
    ev = _per_seed(results, configs[evolved])
    rows = [_policy_row(family, evolved, True, results, configs[evolved])]
    builtins = [p for p in configs if p != evolved]
    comparisons = [compare(_per_seed(results, configs[p]), ev, alpha) for p in builtins]
    adjusted = holm([c.p_value for c in comparisons])
    for policy, comp, p_holm in zip(builtins, comparisons, adjusted):
        row = _policy_row(family, policy, False, results, configs[policy])
        base = row["fitness_mean"]
        rel = comp.diff_mean / abs(base) if math.isfinite(base) and base != 0 else math.nan
        verdict = "tied"
        if not math.isnan(p_holm) and p_holm < alpha:
            verdict = "better" if comp.diff_mean > 0 else "worse"
        row.update(
            diff=comp.diff_mean,
            diff_ci_low=comp.diff_low,
            diff_ci_high=comp.diff_high,
            rel_diff=rel,
            n_paired=comp.n,
            p_value=comp.p_value,
            p_holm=p_holm,
            verdict=verdict,  # the evolved policy against this built-in
        )
        rows.append(row)
    return rows


def compare_families(
    results: pd.DataFrame, configs: list[list[str]], keys: list[tuple[str, str]], evolved: str, alpha: float = 0.05
) -> pd.DataFrame:
    """One row per family and policy (holdout.csv); ``configs``/``keys`` as :func:`plan` returns them."""
    by_family: dict[str, dict[str, str]] = {}
    for config, (family, policy) in zip(configs, keys):
        by_family.setdefault(family, {})[policy] = " ".join(config)
    rows = []
    for family, policies in by_family.items():
        rows += _family_rows(family, evolved, results, policies, alpha)
    table = pd.DataFrame(rows)
    table["best_builtin"] = False
    for _, group in table[~table["evolved"]].groupby("family", sort=False):
        ranked = group[group["n"] > 0].sort_values(["fitness_mean", "policy"], ascending=[False, True])
        if len(ranked):
            table.loc[ranked.index[0], "best_builtin"] = True
    return table


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per family, the evolved policy against that family's best built-in."""
    best = table[table["best_builtin"]]
    return best[["family", "policy", "fitness_mean", "rel_diff", "p_holm", "verdict"]].rename(
        columns={"policy": "best_builtin", "fitness_mean": "builtin_fitness"}
    ).reset_index(drop=True)


def _num(x: float, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def _p(p: float) -> str:
    return "-" if not math.isfinite(p) else ("<0.001" if p < 0.001 else f"{p:.3f}")


def _cells(r) -> list[str]:
    """One policy of a family as the text table's cells."""
    compared = [] if r.evolved else [
        f"{_num(r.diff, '+.4f')} [{_num(r.diff_ci_low, '+.4f')}, {_num(r.diff_ci_high, '+.4f')}]",
        _num(100 * r.rel_diff, "+.1f") + "%",
        _p(r.p_holm),
        r.verdict,
    ]
    return [
        r.policy + (" (best built-in)" if r.best_builtin else ""),
        str(r.n),
        f"{_num(r.fitness_mean, '.4f')} [{_num(r.fitness_ci_low, '.4f')}, {_num(r.fitness_ci_high, '.4f')}]",
        *(compared or ["", "", "", ""]),
        _num(r.ttft_p99_ms, ".1f"),
        _num(r.tpot_p99_ms, ".1f"),
    ]


HEAD = ["policy", "n", "fitness [95% CI]", "evolved - it [95% CI]", "rel", "p(Holm)", "evolved is", "ttft p99", "tpot p99"]
SUMMARY_HEAD = ["family", "best built-in", "its fitness", "evolved vs it", "p(Holm)", "evolved is"]


def format_table(table: pd.DataFrame, families: Sequence[Family], seeds: Sequence[int]) -> str:
    """The held-out table as text, a block per family, then the evolved policy against each family's
    best built-in."""
    texts = {f.name: f.text for f in families}
    out = [
        f"held-out seeds {', '.join(map(str, seeds))}: the evolved policy against each built-in, paired by "
        "seed, p-values Holm-adjusted within a family; rel = (evolved - built-in) / |built-in|; ms"
    ]
    for family, group in table.groupby("family", sort=False):
        out += ["", f"family {family}: {texts.get(family, '')}"]
        out += aligned([HEAD, *(_cells(r) for r in group.itertuples(index=False))], frozenset({0, 6}))
    rows = [
        [r.family, r.best_builtin, _num(r.builtin_fitness, ".4f"), _num(100 * r.rel_diff, "+.1f") + "%", _p(r.p_holm), r.verdict]
        for r in summary(table).itertuples(index=False)
    ]
    out += ["", *aligned([SUMMARY_HEAD, *rows], frozenset({0, 1, 5}))]
    return "\n".join(out)


def compare_on_holdout(
    s: DictConfig,
    out: Path,
    policy_yaml: Path,
    base: list[str],
    evaluate: Callable[[list[list[str]], list[int], Path], pd.DataFrame],
    families: Sequence[Family],
    *,
    echo: bool,
) -> pd.DataFrame:
    """Run the held-out sweep (``evaluate`` as distsim.search.driver's), write holdout.csv and (``echo``)
    print the table; ``s`` is the search's settings, ``base`` the command line's scenario overrides."""

    seeds = [int(x) for x in s.holdout_seeds]
    searchpath = f"hydra.searchpath=[file://{out.resolve()}]"
    quiet = "sim.write_requests=false"
    from distsim.search.bundle import grid, read_bundle

    bundle = read_bundle(out / "bundle.txt") if (out / "bundle.txt").exists() else []
    policies = [(str(s.name), [f"policy={s.name}", searchpath, quiet, *bundle])]
    policies += [(str(b), [f"policy={b}", quiet]) for b in s.baselines]
    policies += [(b.name, [*b.overrides, quiet]) for b in grid(s.get("baseline_grid"))]
    configs, keys = plan(families, base, policies)
    results = evaluate(configs, seeds, out / sweep_name(policy_yaml.read_bytes() + " ".join(bundle).encode(), configs, seeds))
    table = compare_families(results, configs, keys, str(s.name))
    outputs.write_csv(out / "holdout.csv", table)
    if echo:
        print("\n" + format_table(table, families, seeds))
    return table
