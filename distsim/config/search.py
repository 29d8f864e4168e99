"""Search config schema (``python -m distsim.search``, conf/search.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SearchConfig:
    """What to search, how, and on which seeds.

    ``space`` maps a ``policy.*`` config key to its range: ``{type: float, low, high}``,
    ``{type: int, low, high}`` or ``{type: categorical, choices: [...]}``. Candidates start from the
    ``base_policy`` config and set those keys.
    """

    name: str = "evolved"  # the emitted policy's name (policy/<name>.yaml in the output directory)
    base_policy: str = "weighted"
    algorithm: str = (
        "cmaes"  # cmaes (CMA-ES; CatCMA with margin when there are integers or categories) | random
    )
    population: int = 8
    generations: int = 6
    budget: int | None = None  # simulations at most (candidates x train seeds); null: generations decide
    seed: int = 0  # the optimiser's own seed
    train_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    holdout_seeds: list[int] = field(default_factory=lambda: [100, 101, 102, 103, 104, 105])
    space: dict[str, Any] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)  # built-in policies to compare on held-out seeds
