"""The search loop.

Each generation asks the optimiser for candidates, evaluates every candidate on the same training
seeds (common random numbers: every candidate sees the same requests) as one sweep on the runner's
Ray actor pool, and tells the optimiser each candidate's mean fitness. Generations are synchronous,
which keeps the search deterministic whatever order jobs finish in.

Resume: every generation is a sweep directory, and the runner skips jobs whose results are already
there. A rerun asks the same candidates again (the optimiser is seeded), finds their results, and goes
on from the first unfinished generation.

Outputs in the search directory: candidates.parquet (every candidate, its overrides and its fitness
per seed), convergence.png, policy/<name>.yaml (the best candidate as a ready policy config),
holdout.csv (best and built-ins on held-out seeds, ranked with the runner's paired statistics; their
sweep is holdout_<digest of the policy file>/). With search.algorithm=gp the candidates are routing
expressions and policy/<name>.py is the winner as numpy code; with several search.objectives the winner is
the first front's candidate of best fitness, and pareto.csv / pareto.png show every candidate and the
baselines on the training seeds (distsim.search.gp_outputs). Every file goes through distsim.outputs. A
search whose first generation has no candidate that ran on every training seed stops there with SearchFailed.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from distsim import outputs
from distsim.config.compose import CONF_DIR
from distsim.errors import ConfigError, UserError
from distsim.search import objectives as objs
from distsim.search.gp import EXPRESSION_KEY
from distsim.search.gp_outputs import write_module, write_pareto
from distsim.search.optimizer import build_optimizer, check_optimizer
from distsim.search.space import SearchSpace, Value

# configs (each a list of overrides) x seeds -> the sweep's results table (distsim.search.evaluate)
Evaluate = Callable[[list[list[str]], list[int], Path], pd.DataFrame]


@dataclass
class SearchResult:
    out_dir: Path
    candidates: pd.DataFrame
    best_overrides: list[str]
    best_train_fitness: float
    policy_yaml: Path
    holdout: pd.DataFrame | None


def check_settings(cfg: DictConfig) -> None:
    """Every search.* and runner.* setting and the scenario, checked before Ray starts: a bad one is one
    line (ConfigError) at once, not a failed first generation after Ray's start-up."""
    from distsim.resolve import resolve
    from distsim.runner.settings import RunnerSettings

    _check(cfg)
    SearchSpace(cfg.search.space)
    check_optimizer(str(cfg.search.algorithm), int(cfg.search.population))
    RunnerSettings.from_node(cfg.runner).validate()
    resolve(copy.deepcopy(cfg))


def _check(cfg: DictConfig) -> None:
    s = cfg.search
    if not s.train_seeds:
        raise ConfigError("search.train_seeds", "needs at least one seed")
    if s.generations < 1:
        raise ConfigError("search.generations", f"must be >= 1 (got {s.generations})")
    if s.budget is not None and s.budget < s.population * len(s.train_seeds):
        raise ConfigError("search.budget", "must allow at least one generation (population x train seeds)")
    overlap = set(s.train_seeds) & set(s.holdout_seeds)
    if overlap:
        raise ConfigError("search.holdout_seeds", f"must not repeat training seeds ({sorted(overlap)})")
    if not (CONF_DIR / "policy" / f"{s.base_policy}.yaml").exists():
        raise ConfigError("search.base_policy", f"no conf/policy/{s.base_policy}.yaml")
    for b in s.baselines:
        if not (CONF_DIR / "policy" / f"{b}.yaml").exists():
            raise ConfigError("search.baselines", f"no conf/policy/{b}.yaml")
    objs.objectives(s.get("objectives"), str(s.algorithm))
    if s.algorithm == "gp":
        from distsim.search.gp import GPSettings

        GPSettings.from_node(s.get("gp")).check()


def _generation_rows(
    gen: int, cand_values: list[dict[str, Value]], fitness: list[list[float]], seeds: list[int]
) -> tuple[list[dict[str, Value]], list[float]]:
    """candidates.parquet rows of one generation, and each candidate's mean fitness for the optimiser
    (a candidate that failed on a seed is told a very low fitness)."""
    rows, means = [], []
    for i, (values, per_seed) in enumerate(zip(cand_values, fitness)):
        mean = float(sum(per_seed) / len(per_seed)) if all(math.isfinite(f) for f in per_seed) else -math.inf
        means.append(mean if math.isfinite(mean) else -1e9)
        overrides = " ".join(SearchSpace.overrides(values))
        for seed, f in zip(seeds, per_seed):
            rows.append(
                {
                    "generation": gen,
                    "candidate": i,
                    "overrides": overrides,
                    "seed": seed,
                    "fitness": f,
                    **values,
                }
            )
    return rows, means


def _evolve(s: DictConfig, out: Path, base_overrides: list[str], evaluate: Evaluate, echo: bool) -> pd.DataFrame:
    """Every generation, asked, evaluated on the training seeds and told: the candidates table."""
    space = SearchSpace(s.space)
    names = objs.objectives(s.get("objectives"), str(s.algorithm))
    optimizer = build_optimizer(s.algorithm, space, int(s.population), int(s.seed), s.get("gp"), objs.weights(names))
    seeds = [int(x) for x in s.train_seeds]
    base = [*base_overrides, f"policy={base_policy(s)}", "sim.write_requests=false"]
    generations = int(s.generations)
    if s.budget is not None:
        generations = min(generations, int(s.budget) // (int(s.population) * len(seeds)))
    rows: list[dict[str, Value]] = []
    any_ok = False
    for gen in range(generations):
        asked = optimizer.ask()
        cand_values = [optimizer.values(point) for _, point in asked]
        configs = [[*base, *SearchSpace.overrides(values)] for values in cand_values]
        results = evaluate(configs, seeds, out / f"gen_{gen:03d}")
        fitness = _fitness_by_config(results, configs, seeds)
        any_ok = any_ok or any(all(math.isfinite(f) for f in per_seed) for per_seed in fitness)
        if not any_ok:  # nothing to learn from, and no policy to write: stop now, saying why
            raise SearchFailed(results)
        gen_rows, means = _generation_rows(gen, cand_values, fitness, seeds)
        metrics = objs.per_seed(results, configs, seeds, objs.FRONT_METRICS)
        rows += [{**row, **m} for row, m in zip(gen_rows, (m for per in metrics for m in per))]
        told = means if names is None else [objs.means(per, names) for per in objs.per_seed(results, configs, seeds, names)]
        optimizer.tell([(handle, value) for (handle, _), value in zip(asked, told)])
        if echo:
            print(
                f"search: generation {gen + 1}/{generations}: best mean fitness {max(means):.4f}", flush=True
            )
    table = pd.DataFrame(rows)
    table["mean_fitness"] = table.groupby(["generation", "candidate"])["fitness"].transform("mean")
    return table


def run_search(
    cfg: DictConfig, out_dir: str | Path, base_overrides: list[str], *, evaluate: Evaluate, echo: bool = True
) -> SearchResult:
    """``evaluate(configs, seeds, sweep_dir)`` runs every config (a list of overrides) on every seed
    and returns the runner's results table; ``base_overrides`` are the user's scenario overrides."""
    _check(cfg)
    s = cfg.search
    out = outputs.prepare_dir(out_dir)
    table = _evolve(s, out, base_overrides, evaluate, echo)
    names = objs.objectives(s.get("objectives"), str(s.algorithm))
    if names is not None:  # several objectives: the best is the front's candidate of best fitness
        table["on_front"] = objs.front_of(table, names)
    outputs.write_parquet(out / "candidates.parquet", table)
    pool = table[table["on_front"]] if names is not None else table
    best_row = pool.sort_values(
        ["mean_fitness", "generation", "candidate"], ascending=[False, True, True]
    ).iloc[0]
    keys = [EXPRESSION_KEY] if s.algorithm == "gp" else [v.key for v in SearchSpace(s.space).variables]
    best_values = {k: best_row[k] for k in keys}
    best_values = {k: (v.item() if hasattr(v, "item") else v) for k, v in best_values.items()}
    policy_yaml = write_policy(out, s.name, base_policy(s), best_values)
    plot_convergence(table, out / "convergence.png")
    if s.algorithm == "gp":
        write_module(out, s.name, str(best_values[EXPRESSION_KEY]), policy_yaml)
    if names is not None:
        write_pareto(cfg, out, table, names, base_overrides, evaluate)

    holdout = None
    if s.holdout_seeds:
        holdout = compare_on_holdout(cfg, out, policy_yaml, base_overrides, evaluate, echo=echo)
    return SearchResult(
        out, table, SearchSpace.overrides(best_values), float(best_row["mean_fitness"]), policy_yaml, holdout
    )


class SearchFailed(UserError):
    """Every candidate so far failed on a training seed: there is no best policy to write."""

    def __init__(self, results: pd.DataFrame):
        failed = results[results["status"] != "ok"].sort_values("job")
        if len(failed):
            first = failed.iloc[0]
            why = f"first failure, job {first['job']}: {first['error']}"
        else:
            why = "no job reported a finite fitness"
        super().__init__(
            f"search error: every candidate of the first generation failed on its training seeds, "
            f"so no policy was written ({why})"
        )


def _fitness_by_config(
    results: pd.DataFrame, configs: list[list[str]], seeds: list[int]
) -> list[list[float]]:
    by_key = {}
    for row in results.itertuples(index=False):
        f = row.fitness if row.status == "ok" and row.fitness is not None else -math.inf
        by_key[(row.config, int(row.seed))] = float(f)
    return [[by_key.get((" ".join(c), seed), -math.inf) for seed in seeds] for c in configs]


def base_policy(s: DictConfig) -> str:
    """The policy candidates start from: gp's candidates are expressions, so its base is an expression
    policy (search.base_policy if that is one, else conf/policy/expression.yaml)."""
    if s.algorithm != "gp":
        return str(s.base_policy)
    node = OmegaConf.load(CONF_DIR / "policy" / f"{s.base_policy}.yaml")
    return str(s.base_policy) if node.routing.kind == "expression" else "expression"


def write_policy(out: Path, name: str, base_policy: str, values: dict[str, Value]) -> Path:
    """The best candidate as a policy config: the base policy's file with the searched keys set."""
    node = OmegaConf.load(CONF_DIR / "policy" / f"{base_policy}.yaml")
    for key, value in values.items():
        OmegaConf.update(node, key[len("policy.") :], value, force_add=True)
    node.name = name
    path = outputs.prepare_dir(out / "policy") / f"{name}.yaml"
    header = (
        f"# Evolved by python -m distsim.search from policy={base_policy}.\n"
        f"# Run it with: python -m distsim hydra.searchpath=[file://{out.resolve()}] policy={name}\n"
        f"# or copy it into conf/policy/.\n"
    )
    return outputs.write_text(path, header + OmegaConf.to_yaml(node))


def compare_on_holdout(
    cfg: DictConfig, out: Path, policy_yaml: Path, base_overrides: list[str], evaluate: Evaluate, *, echo: bool
) -> pd.DataFrame:
    """The evolved policy and every baseline on seeds the search never saw, ranked with paired tests."""
    from distsim.runner.ranking import rank_configs

    s = cfg.search
    seeds = [int(x) for x in s.holdout_seeds]
    searchpath = f"hydra.searchpath=[file://{out.resolve()}]"
    configs = [[*base_overrides, f"policy={s.name}", searchpath, "sim.write_requests=false"]]
    configs += [[*base_overrides, f"policy={b}", "sim.write_requests=false"] for b in s.baselines]
    # the evolved jobs' overrides name the policy file, not its values: a sweep directory per policy
    # content, so a rerun whose best changed never resumes the older policy's results
    digest = hashlib.sha256(policy_yaml.read_bytes()).hexdigest()[:12]
    results = evaluate(configs, seeds, out / f"holdout_{digest}")
    parts = {" ".join(c): tuple(c) for c in configs}  # each config's overrides, for the labels
    ranking = rank_configs(results, parts=parts)
    outputs.write_csv(out / "holdout.csv", ranking)
    if echo:
        from distsim.runner.table import format_ranking

        print("\nheld-out seeds " + ", ".join(map(str, seeds)) + ":")
        print(format_ranking(ranking, parts=parts))
    return ranking


def plot_convergence(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = table.groupby(["generation", "candidate"])["mean_fitness"].first().reset_index()
    gen = per.groupby("generation")["mean_fitness"]
    best_so_far = gen.max().cummax()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(per["generation"], per["mean_fitness"], s=12, alpha=0.5, label="candidates")
    ax.plot(gen.mean().index, gen.mean().values, label="generation mean")
    ax.plot(best_so_far.index, best_so_far.values, label="best so far", linewidth=2)
    ax.set_xlabel("generation")
    ax.set_ylabel("mean fitness on training seeds")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)
