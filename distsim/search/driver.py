"""The search loop.

Each generation asks the optimiser for candidates (each a list of policy overrides) and evaluates
every candidate on every training family (distsim.search.families) and the same training seeds
(common random numbers: every candidate sees the same requests) as one sweep on the runner's Ray actor
pool, then tells the optimiser each candidate's training score: the mean over families of its relative
difference to the reference built-in (search.reference), whose own runs are one sweep, reference/,
before the first generation. Generations are synchronous, which keeps the search deterministic
whatever order jobs finish in. Each generation prints one progress line (distsim.search.progress).

Resume: every generation is a sweep directory, and the runner skips jobs whose results are already
there. A rerun asks the same candidates again (the optimiser is seeded), finds their results, and goes
on from the first unfinished generation.

Outputs in the search directory: candidates.parquet (every candidate, its overrides and its fitness
per family and seed), convergence.png, policy/<name>.yaml (the best candidate as a ready policy
config), holdout.csv (the best against every built-in on each held-out family, distsim.search.holdout;
their sweep is holdout_<digest>/). Every file goes through distsim.outputs. A search whose first
generation has no candidate that ran on every training family and seed stops there with SearchFailed.

Any optimiser (cmaes, random, gp) is told the training score above. With search.algorithm=gp the candidates
are routing expressions and policy/<name>.py is the winner as numpy code. With several search.objectives
(NSGA-II, gp only) each candidate's objectives are, like the training score, relative to the reference on
each training family and averaged over the families (distsim.search.objectives says why), and NSGA-II is
told those; the winner is the candidate of best training score on the first front of every candidate, and
pareto.csv / pareto.png show every candidate and the baselines, run on the same training families and seeds
and made relative the same way (distsim.search.gp_outputs). The progress line then also counts the front.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from distsim import outputs
from distsim.config.compose import CONF_DIR
from distsim.errors import ConfigError, UserError
from distsim.search import objectives as objs
from distsim.search.bundle import grid as bundle_grid
from distsim.search.bundle import split as split_bundle
from distsim.search.bundle import write_bundle
from distsim.search.families import (
    GridRuns,
    Reference,
    TrainingGrid,
    family_scores,
    holdout_families,
    reference_means,
    train_families,
    training_score,
)
from distsim.search.gp import EXPRESSION_KEY
from distsim.search.gp_outputs import write_module, write_pareto
from distsim.search.holdout import compare_on_holdout
from distsim.search.optimizer import build_optimizer, check_optimizer
from distsim.search.progress import SearchProgress, resumed_jobs
from distsim.search.race import RaceSettings, survivors, told
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


def check_scenarios(cfg: DictConfig, base_overrides: list[str], compose: Callable[[list[str]], DictConfig]) -> None:
    """Every family's scenario composed (``compose`` takes overrides) and resolved before Ray starts: a
    bad one is one line naming the family."""
    from distsim.resolve import resolve

    s = cfg.search
    for where, families in (("search.train", train_families(s)), ("search.holdout", holdout_families(s))):
        for family in families:
            if not family.overrides:
                continue
            try:
                resolve(compose(family.config(base_overrides, [f"policy={base_policy(s)}"])))
            except UserError as err:
                raise ConfigError(f"{where}.{family.name}", str(err)) from None


def _check(cfg: DictConfig) -> None:
    s = cfg.search
    if not s.train_seeds:
        raise ConfigError("search.train_seeds", "needs at least one seed")
    if s.generations < 1:
        raise ConfigError("search.generations", f"must be >= 1 (got {s.generations})")
    per_generation = _jobs_per_generation(s, RaceSettings.from_node(s.get("race")), len(train_families(s)))
    if s.budget is not None and s.budget < per_generation:
        raise ConfigError(
            "search.budget",
            f"must allow at least one generation (population x training families x seeds = {per_generation}, "
            "fewer with a race)",
        )
    overlap = set(s.train_seeds) & set(s.holdout_seeds)
    if overlap:
        raise ConfigError("search.holdout_seeds", f"must not repeat training seeds ({sorted(overlap)})")
    if not (CONF_DIR / "policy" / f"{s.base_policy}.yaml").exists():
        raise ConfigError("search.base_policy", f"no conf/policy/{s.base_policy}.yaml")
    if s.get("reference") is not None and not (CONF_DIR / "policy" / f"{s.reference}.yaml").exists():
        raise ConfigError("search.reference", f"no conf/policy/{s.reference}.yaml")
    holdout_families(s)
    for b in s.baselines:
        if not (CONF_DIR / "policy" / f"{b}.yaml").exists():
            raise ConfigError("search.baselines", f"no conf/policy/{b}.yaml")
    RaceSettings.from_node(s.get("race")).check(len(s.train_seeds))
    bundle_grid(s.get("baseline_grid"))
    check_optimizer(str(s.algorithm), int(s.population))  # a bad algorithm is said before its objectives
    objs.objectives(s.get("objectives"), str(s.algorithm))
    if s.algorithm == "gp":
        from distsim.search.gp import GPSettings

        GPSettings.from_node(s.get("gp")).check()


def _generation_rows(
    gen: int, cand_values: list[dict[str, Value]], runs: GridRuns, seeds: list[int], ref: Reference, names: list[str] | None,
    ids: list[int] | None = None, raced_out: bool = False,
) -> tuple[list[dict[str, Value]], list[float], list[float | tuple[float, ...]]]:
    """candidates.parquet rows of one generation (one per candidate, family and seed), each candidate's
    training score (distsim.search.families: a candidate that failed on any family or seed scores very
    low), and what the optimiser is told: that score, or the objectives over the families. ``ids``: the
    candidates' numbers in the generation (a race's survivors are some of them); ``raced_out``: these rows
    are a race's only (distsim.search.race)."""
    rows, scores, told = [], [], []
    for i, values in enumerate(cand_values):
        by_family = family_scores(runs.fitness[i], ref.fitness)
        score = training_score(by_family)
        scores.append(score if math.isfinite(score) else -1e9)
        objectives = objs.across_families(runs.metrics[i], names, ref.objectives) if names else ()
        told.append(objectives if names else scores[-1])
        overrides = " ".join(SearchSpace.overrides(values))
        per_candidate = {"train_score": score, **{objs.column(n): v for n, v in zip(names or (), objectives)}}
        for family, per_seed in runs.fitness[i].items():
            for seed, f, metrics in zip(seeds, per_seed, runs.metrics[i][family]):
                rows.append(
                    {
                        "generation": gen,
                        "candidate": i if ids is None else ids[i],
                        "overrides": overrides,
                        "family": family,
                        "seed": seed,
                        "fitness": f,
                        "family_score": by_family[family],
                        "raced_out": raced_out,
                        **per_candidate,
                        **values,
                        **{m: metrics[m] for m in objs.FRONT_METRICS},
                    }
                )
    return rows, scores, told


def _reference(
    s: DictConfig, grid: TrainingGrid, seeds: list[int], out: Path, evaluate: Evaluate, names: list[str] | None,
    extra: tuple[str, ...] = (),
) -> Reference:
    """The reference built-in's means per training family (its own sweep, reference/), or none; ``extra``:
    the race's overrides (its sweep is reference_race/)."""
    if s.get("reference") is None:
        return Reference()
    policy = [[f"policy={s.reference}", "sim.write_requests=false", *extra]]
    runs = grid.run(policy, seeds, out / ("reference_race" if extra else "reference"), evaluate, names or ())
    fitness = reference_means(runs.fitness[0], str(s.reference))
    objectives = objs.reference_objectives(runs.metrics[0], names, str(s.reference)) if names else None
    return Reference(fitness, objectives)


def _front_summary(scores: list[float], names: list[str] | None, told_so_far: list) -> str:
    finite = [x for x in scores if x > -1e9] or scores or [-1e9]
    summary = f"best training score {max(finite):+.4f}"
    if names:
        summary += f"  front {int(objs.first_front(np.array(told_so_far), objs.weights(names)).sum())}"
    return summary


@dataclass
class _Generation:
    """One generation's rows, training scores (NaN-free; -1e9 failed) and what the optimiser is told."""

    rows: list
    scores: list[float]
    told: list
    results: pd.DataFrame
    resumed: int


def _raced(
    s: DictConfig, race: RaceSettings, gen: int, candidates: list[list[str]], cand_values: list[dict[str, Value]],
    grid: TrainingGrid, seeds: list[int], refs: tuple[Reference, Reference], out: Path, evaluate: Evaluate,
    recorded: list[str],
) -> _Generation:
    """A raced generation (distsim.search.race): every candidate on the race, the survivors in full."""
    first = seeds[: race.first_seeds]
    quick = grid.run([[*c, *race.first] for c in candidates], first, out / f"gen_{gen:03d}_race", evaluate, recorded)
    out_rows, race_scores, _ = _generation_rows(gen, cand_values, quick, first, refs[0], None, raced_out=True)
    keep = survivors(race_scores, float(race.keep))
    full = grid.run([candidates[i] for i in keep], seeds, out / f"gen_{gen:03d}", evaluate, recorded)
    rows, scores, _ = _generation_rows(gen, [cand_values[i] for i in keep], full, seeds, refs[1], None, ids=keep)
    kept = set(keep)
    rows += [r for r in out_rows if r["candidate"] not in kept]
    by_id = dict(zip(keep, scores))
    all_scores = [by_id.get(i, -1e9) for i in range(len(candidates))]
    resumed = resumed_jobs(quick.results) + resumed_jobs(full.results)
    return _Generation(rows, all_scores, told(race_scores, by_id), full.results, resumed)


def _evolve(
    s: DictConfig, out: Path, base_overrides: list[str], evaluate: Evaluate, echo: bool
) -> tuple[pd.DataFrame, TrainingGrid, Reference]:
    """Every generation, asked, evaluated on the training families and seeds and told: the candidates
    table (and the grid and reference it was scored with). The best candidate so far is written after
    every generation (:func:`write_best`), so a stopped search leaves it."""
    space = SearchSpace(s.space)
    names = objs.objectives(s.get("objectives"), str(s.algorithm))
    optimizer = build_optimizer(s.algorithm, space, int(s.population), int(s.seed), s.get("gp"), objs.weights(names))
    seeds = [int(x) for x in s.train_seeds]
    race = RaceSettings.from_node(s.get("race"))
    grid = TrainingGrid(tuple(train_families(s)), tuple(base_overrides))
    policy = [f"policy={base_policy(s)}", "sim.write_requests=false"]
    generations = _generations(s, len(grid.families))
    held_out = (1 + len(s.baselines) + len(bundle_grid(s.get("baseline_grid")))) * len(holdout_families(s)) * len(s.holdout_seeds)
    progress = SearchProgress(generations, _jobs_per_generation(s, race, len(grid.families)), held_out, echo)
    progress.note(f"training on {len(grid.families)} families x {len(seeds)} seeds; the reference "
                  f"({s.get('reference')}) first")  # fmt: skip
    reference = _reference(s, grid, seeds, out, evaluate, names)
    refs = (_reference(s, grid, seeds[: race.first_seeds], out, evaluate, None, race.first) if race.on else reference, reference)
    progress.note(f"reference done; generation 1 of {generations} running")
    recorded = list(dict.fromkeys([*objs.FRONT_METRICS, *(names or ())]))
    rows: list[dict[str, Value]] = []
    told_so_far: list = []
    scores_so_far: list[float] = []  # the progress line's best is the best yet, not the generation's
    for gen in range(generations):
        asked = optimizer.ask()
        cand_values = [optimizer.values(point) for _, point in asked]
        candidates = [[*policy, *SearchSpace.overrides(values)] for values in cand_values]
        if race.on and names is None:
            done = _raced(s, race, gen, candidates, cand_values, grid, seeds, refs, out, evaluate, recorded)
        else:
            runs = grid.run(candidates, seeds, out / f"gen_{gen:03d}", evaluate, recorded)
            gen_rows, scores, told_ = _generation_rows(gen, cand_values, runs, seeds, reference, names)
            done = _Generation(gen_rows, scores, told_, runs.results, resumed_jobs(runs.results))
        if gen == 0 and max(done.scores) <= -1e9:  # nothing to learn from, and no policy to write: stop, saying why
            raise SearchFailed(done.results)
        rows += done.rows
        told_so_far += done.told
        scores_so_far += done.scores
        optimizer.tell([(handle, value) for (handle, _), value in zip(asked, done.told)])
        write_best(s, out, _table(rows), names)
        progress.generation_done(_front_summary(scores_so_far, names, told_so_far), resumed=done.resumed)
    return _table(rows), grid, reference


def _table(rows: list[dict[str, Value]]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    table["mean_fitness"] = table.groupby(["generation", "candidate"])["fitness"].transform("mean")
    return table


def _jobs_per_generation(s: DictConfig, race: RaceSettings, families: int) -> int:
    full = int(s.population) * families * len(s.train_seeds)
    if not race.on:
        return full
    kept = min(int(s.population), max(2, math.ceil(float(race.keep) * int(s.population))))
    return int(s.population) * families * race.first_seeds + kept * families * len(s.train_seeds)


def best_row(s: DictConfig, table: pd.DataFrame, names: list[str] | None) -> pd.Series:
    """The best fully evaluated candidate (a raced-out one never is): the front's best with objectives."""
    pool = table[~table["raced_out"]] if "raced_out" in table else table
    if names is not None:
        pool = pool[objs.front_of(pool, names)]
    return pool.sort_values(["train_score", "generation", "candidate"], ascending=[False, True, True]).iloc[0]


def best_values(s: DictConfig, row: pd.Series) -> dict[str, Value]:
    """The searched keys the best candidate set (a part it left off is absent), each of its variable's type
    again (a column with absent parts is float in pandas)."""
    if s.algorithm == "gp":
        return {EXPRESSION_KEY: str(row[EXPRESSION_KEY])}
    out = {}
    for var in SearchSpace(s.space).variables:
        v = row.get(var.key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        v = v.item() if hasattr(v, "item") else v
        if var.kind == "int":
            v = int(v)
        elif var.kind == "categorical":
            v = next(c for c in var.choices if c == v)
        out[var.key] = v
    return out


def write_best(s: DictConfig, out: Path, table: pd.DataFrame, names: list[str] | None) -> Path:
    """The best candidate so far as policy/<name>.yaml and bundle.txt (distsim.search.bundle)."""
    values = best_values(s, best_row(s, table, names))
    policy_values, _ = split_bundle(values)
    path = write_policy(out, s.name, base_policy(s), policy_values)
    write_bundle(out, str(s.name), values)
    return path


def _generations(s: DictConfig, families: int) -> int:
    """search.generations, or fewer where search.budget (simulations) ends first; a raced generation
    costs its race and its survivors' full runs (:func:`_jobs_per_generation`)."""
    generations = int(s.generations)
    if s.budget is not None:
        per = _jobs_per_generation(s, RaceSettings.from_node(s.get("race")), families)
        generations = min(generations, int(s.budget) // per)
    return generations


def run_search(
    cfg: DictConfig, out_dir: str | Path, base_overrides: list[str], *, evaluate: Evaluate, echo: bool = True
) -> SearchResult:
    """``evaluate(configs, seeds, sweep_dir)`` runs every config (a list of overrides) on every seed
    and returns the runner's results table; ``base_overrides`` are the user's scenario overrides."""
    _check(cfg)
    s = cfg.search
    out = outputs.prepare_dir(out_dir)
    table, grid, reference = _evolve(s, out, base_overrides, evaluate, echo)
    names = objs.objectives(s.get("objectives"), str(s.algorithm))
    if names is not None:  # several objectives: the best is the front's candidate of best training score
        table["on_front"] = objs.front_of(table, names)
    outputs.write_parquet(out / "candidates.parquet", table)
    row = best_row(s, table, names)
    values = best_values(s, row)
    policy_yaml = write_best(s, out, table, names)
    plot_convergence(table, out / "convergence.png")
    if s.algorithm == "gp":
        write_module(out, s.name, str(values[EXPRESSION_KEY]), policy_yaml)
    if names is not None:
        write_pareto(s, out, table, names, grid, reference, evaluate)

    holdout = None
    judged = holdout_families(s)
    if judged:
        holdout = compare_on_holdout(s, out, policy_yaml, base_overrides, evaluate, judged, echo=echo)
    return SearchResult(
        out, table, SearchSpace.overrides(values), float(row["train_score"]), policy_yaml, holdout
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


def plot_convergence(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = table.groupby(["generation", "candidate"])["train_score"].first().reset_index()
    per = per[per["train_score"] > -math.inf]
    gen = per.groupby("generation")["train_score"]
    best_so_far = gen.max().cummax()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(per["generation"], per["train_score"], s=12, alpha=0.5, label="candidates")
    ax.plot(gen.mean().index, gen.mean().values, label="generation mean")
    ax.plot(best_so_far.index, best_so_far.values, label="best so far", linewidth=2)
    ax.set_xlabel("generation")
    ax.set_ylabel("training score (distsim.search.families)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)
