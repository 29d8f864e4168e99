"""Search config schema (``python -m distsim.search``, conf/search.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GPConfig:
    """Genetic programming over routing expressions (``search.algorithm=gp``, distsim.search.gp)."""

    max_height: int = 8  # static limits on every tree (bloat control), at most 17
    max_size: int = 40  # nodes, 3 to 1000
    init_min_height: int = 1  # ramped half-and-half heights of the first generation's random trees:
    init_max_height: int = 4  # 1 <= init_min_height <= init_max_height <= min(10, max_height)
    crossover: float = 0.6  # share of offspring made by one-point crossover; the rest by a mutation
    seeds: list[str] = field(default_factory=list)  # expressions in the first generation (the built-ins)


@dataclass
class SearchConfig:
    """What to search, how, and on which seeds.

    ``space`` maps a short name to a ``policy.*`` (or bundle: ``cluster.engine.*``, ``cluster.pools.*``,
    ``cluster.autoscale.*``) config key and its range: ``{key, type: float, low,
    high}``, ``{key, type: int, low, high}`` or ``{key, type: categorical, choices: [...]}`` (without
    ``key``, the name is the config key). Candidates start from the ``base_policy`` config and set those
    keys. ``train`` and ``holdout`` map family names to scenario overrides (distsim.search.families).
    ``python -m distsim.search`` composes conf/search.yaml, which sets its own values over these defaults.
    """

    name: str = "evolved"  # the emitted policy's name (policy/<name>.yaml in the output directory)
    base_policy: str = "weighted"  # the policy config candidates start from
    algorithm: str = (
        "cmaes"  # cmaes (CMA-ES; CatCMA with margin when there are integers or categories) | random | gp
    )
    population: int = 8  # candidates per generation
    generations: int = 6  # generations (unless budget ends the search first)
    budget: int | None = None  # simulations at most (candidates x train seeds); null: generations decide
    seed: int = 0  # the optimiser's own seed
    train_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # every candidate runs on every training family and seed
    holdout_seeds: list[int] = field(default_factory=lambda: [100, 101, 102, 103, 104, 105])  # seeds of the held-out comparison, never seen in training
    space: dict[str, Any] = field(default_factory=dict)  # short name -> {key, type, low, high} or {key, type: categorical, choices}
    # family name -> scenario overrides (one string, space-separated, or a list); empty: the scenario itself
    train: dict[str, Any] = field(default_factory=dict)
    holdout: dict[str, Any] = field(default_factory=dict)  # empty: the training scenario, on holdout_seeds
    reference: str | None = "weighted"  # training scores are relative to this built-in; null: raw fitness
    baselines: list[str] = field(default_factory=list)  # built-in policies to compare on held-out seeds
    # fitness, or a list of ttft_p99_ms, tpot_p99_ms, cost_usd_per_mtok, fitness: NSGA-II (algorithm gp)
    objectives: Any = "fitness"
    gp: GPConfig = field(default_factory=GPConfig)
    # racing (distsim.search.race): {keep: share surviving the race, first_seeds, first: overrides}; {}: none
    race: dict[str, Any] = field(default_factory=dict)
    # built-in bundles judged beside baselines (distsim.search.bundle): {routing: [...], scheduler: [...], admission: [...]}
    baseline_grid: dict[str, Any] = field(default_factory=dict)
