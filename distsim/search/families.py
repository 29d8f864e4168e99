"""Scenario families: what a search trains on (``search.train``) and is judged on (``search.holdout``).

A family is a name and a set of scenario overrides (a workload config group, its rate and size, a fleet
size, ...), written as one string of space-separated overrides or as a list of them::

    train:
      chat: workload=default workload.num_requests=600 workload.arrival.rate_rps=11
      bursts: [workload=mmpp_burst, workload.num_requests=800]

On the command line: ``search.train.chat='workload=default workload.arrival.rate_rps=8'`` replaces a
family, ``+search.holdout.big='cluster.instances=8'`` adds one, ``~search.train.chat`` or
``search.train.chat=null`` drops one (an empty string is the scenario as configured).

Every evaluation composes the search's primary config with, in order: the family's overrides, the
command line's scenario overrides (so what you type applies to every family and wins over a family's
own value of the same key), then the candidate's policy overrides. Without families (an empty map) the
search trains on the scenario itself, one family named ``scenario``; without ``search.holdout`` the
held-out comparison runs on that scenario too, on ``search.holdout_seeds``.

Training fitness (the one number the optimiser is told) is the mean over training families of the
candidate's relative difference to a reference built-in on that family: (mean fitness of the candidate
over the training seeds - the reference's) / |the reference's|, so families whose fitness has different
scales weigh the same, and 0.03 reads "3% better than the reference on the average family". With
``search.reference: null`` it is the plain mean of the per-family mean fitness.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from distsim.errors import ConfigError, UserError
from distsim.search import objectives as objs

SCENARIO = "scenario"  # the one family of a search without search.train
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# keys a family cannot set: the search decides the policy and the seed, and owns search.* and runner.*
_RESERVED = ("policy", "seed", "search", "runner", "hydra")


@dataclass(frozen=True)
class Family:
    name: str
    overrides: tuple[str, ...]

    def config(self, base: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
        """One evaluation's overrides: the family's, then the command line's, then ``extra`` (the policy, and
        a bundle's keys as this family's scenario makes them: distsim.search.bundle.derive)."""
        from distsim.search.bundle import derive

        return [*self.overrides, *base, *derive([*self.overrides, *base], extra)]

    @property
    def text(self) -> str:
        return " ".join(self.overrides) or "(the scenario as configured)"


def _override_list(raw: object, where: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        return tuple(raw.split())
    if isinstance(raw, Sequence) and all(isinstance(x, str) for x in raw):
        return tuple(raw)
    raise ConfigError(where, f"must be a string of overrides or a list of them (got {raw!r})")


def _check_overrides(overrides: tuple[str, ...], where: str) -> None:
    from distsim.runner.overrides import from_lines

    try:
        parsed = from_lines(list(overrides))
    except UserError as err:
        raise ConfigError(where, str(err).removeprefix("sweep error: ")) from None
    for o in parsed:
        if o.key.split(".")[0].split("@")[0] in _RESERVED:
            raise ConfigError(where, f"{o.text}: a family sets the scenario, not {o.key.split('.')[0]}")


def parse_families(node: Mapping[str, object] | None, where: str) -> list[Family]:
    """The families of ``search.train`` or ``search.holdout`` (``where``), in the order written."""
    if node is None:
        return []
    if not isinstance(node, Mapping):
        raise ConfigError(where, f"must map family names to overrides (got {node!r})")
    families = []
    for name, raw in node.items():
        key = f"{where}.{name}"
        if raw is None:  # search.train.chat=null drops a family, as ~search.train.chat does
            continue
        if not _NAME.match(str(name)):
            raise ConfigError(key, "a family name is a letter or _ then letters, digits, _ or -")
        overrides = _override_list(raw, key)
        _check_overrides(overrides, key)
        families.append(Family(str(name), overrides))
    return families


def _plain(node: object) -> object:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node)
    return node


def train_families(search: Mapping) -> list[Family]:
    return parse_families(_plain(search.get("train")), "search.train") or [Family(SCENARIO, ())]


def holdout_families(search: Mapping) -> list[Family]:
    """Held-out families; none without held-out seeds."""
    if not search.get("holdout_seeds"):
        return []
    return parse_families(_plain(search.get("holdout")), "search.holdout") or [Family(SCENARIO, ())]


def relative(value: float, reference: float) -> float:
    """(value - reference) / |reference|: higher fitness is better, whatever the reference's sign."""
    if not (math.isfinite(value) and math.isfinite(reference)):
        return -math.inf
    return (value - reference) / abs(reference)


def family_scores(
    per_seed: Mapping[str, Sequence[float]], reference: Mapping[str, float] | None
) -> dict[str, float]:
    """Each family's score of one candidate: its relative difference to the reference's mean fitness
    (``reference`` maps family -> mean), or its mean fitness without a reference. -inf when it failed
    on any seed."""
    out = {}
    for name, values in per_seed.items():
        mean = sum(values) / len(values) if all(math.isfinite(v) for v in values) else -math.inf
        out[name] = mean if reference is None else relative(mean, reference[name])
    return out


def training_score(scores: Mapping[str, float]) -> float:
    """The mean of the per-family scores; -inf when any is not finite."""
    values = list(scores.values())
    if not values or not all(math.isfinite(v) for v in values):
        return -math.inf
    return sum(values) / len(values)


def reference_means(fitness: Mapping[str, Sequence[float]], policy: str) -> dict[str, float]:
    """The reference's mean fitness per family; a reference that failed or scores 0 cannot normalise."""
    out = {}
    for name, values in fitness.items():
        mean = sum(values) / len(values) if values and all(math.isfinite(v) for v in values) else math.nan
        if not math.isfinite(mean) or mean == 0:
            raise UserError(
                f"search error: the reference policy {policy} has no usable fitness on family {name} "
                f"(mean {mean}): set search.reference to another built-in, or null"
            )
        out[name] = mean
    return out


@dataclass(frozen=True)
class TrainingGrid:
    """One generation's evaluations: every candidate (a list of policy overrides) on every training
    family; the sweep runs each of them on every training seed."""

    families: tuple[Family, ...]
    base: tuple[str, ...]  # the command line's scenario overrides

    def configs(self, candidates: Sequence[Sequence[str]]) -> list[list[str]]:
        """Candidate by candidate, family by family."""
        return [f.config(self.base, c) for c in candidates for f in self.families]

    def split(self, per_config: Sequence[Sequence[float]]) -> list[dict[str, list[float]]]:
        """Per-config fitness lists (in :meth:`configs` order) as {family: fitness per seed} per candidate."""
        n = len(self.families)
        return [
            {f.name: list(per_config[i + j]) for j, f in enumerate(self.families)}
            for i in range(0, len(per_config), n)
        ]

    def run(
        self,
        policies: Sequence[Sequence[str]],
        seeds: list[int],
        sweep: Path,
        evaluate: Callable[[list[list[str]], list[int], Path], pd.DataFrame],
        names: Sequence[str] = (),
    ) -> GridRuns:
        """Every candidate (policy overrides) on every family and seed as one sweep, read back per
        candidate: fitness and the objectives ``names`` (distsim.search.objectives) per family and seed."""
        configs = self.configs(policies)
        results = evaluate(configs, seeds, sweep)
        metrics = objs.per_seed(results, configs, seeds, names) if names else [[{}] * len(seeds)] * len(configs)
        return GridRuns(results, self.split(fitness_by_config(results, configs, seeds)), self.split(metrics))


@dataclass(frozen=True)
class Reference:
    """The reference built-in (``search.reference``) on the training families: its mean fitness per family
    (for the training score) and, in a multi-objective search, its mean objectives per family (for
    distsim.search.objectives.across_families); None where there is no reference."""

    fitness: dict[str, float] | None = None
    objectives: dict[str, tuple[float, ...]] | None = None


@dataclass(frozen=True)
class GridRuns:
    """One sweep on a :class:`TrainingGrid`, per candidate: {family: one value (or {objective: value}) per seed}."""

    results: pd.DataFrame
    fitness: list[dict[str, list[float]]]
    metrics: list[dict[str, list[dict[str, float]]]]


def fitness_by_config(results: pd.DataFrame, configs: list[list[str]], seeds: list[int]) -> list[list[float]]:
    """Each config's fitness per seed from a sweep's results table; -inf where a job failed or is missing."""
    by_key = {}
    for row in results.itertuples(index=False):
        f = row.fitness if row.status == "ok" and row.fitness is not None else -math.inf
        by_key[(row.config, int(row.seed))] = float(f)
    return [[by_key.get((" ".join(c), seed), -math.inf) for seed in seeds] for c in configs]
