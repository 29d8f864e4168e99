"""Expand a sweep into jobs with Hydra's own override grammar (comma lists, range(), glob()).

Jobs are the cartesian product of the overrides, in Hydra's basic-sweeper order (keys in command-line
order, the last key varying fastest), so job indices match what ``hydra/sweeper=basic`` would number.
A job's *config* is its overrides but ``seed``: jobs sharing a config differ only by seed, so the driver
composes each config once and derives each job by setting the seed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from distsim.errors import UserError

SEED_KEY = "seed"
RUNNER_PREFIX = "runner."


@dataclass(frozen=True)
class Job:
    """One simulation of a sweep. ``overrides`` identify it (runner.* settings excluded)."""

    index: int
    overrides: tuple[str, ...]
    config: tuple[str, ...]  # overrides but seed
    seed: int | None  # the seed override as an int; None when absent or not an integer literal
    seed_override: str | None  # the raw seed override ("seed=3"), if any

    @property
    def config_key(self) -> str:
        return config_key(self.config)

    @property
    def overrides_str(self) -> str:
        return " ".join(self.overrides)


@dataclass(frozen=True)
class SweepPlan:
    jobs: list[Job]
    runner_overrides: tuple[str, ...]  # runner.* overrides, the same for every job
    swept_keys: tuple[str, ...]  # keys with more than one value (seed included)

    def configs(self) -> dict[str, tuple[str, ...]]:
        """Distinct configs in order of first appearance."""
        out: dict[str, tuple[str, ...]] = {}
        for job in self.jobs:
            out.setdefault(job.config_key, job.config)
        return out


def config_key(config: Sequence[str]) -> str:
    return " ".join(config)


def _key_of(override_str: str) -> str:
    return override_str.split("=", 1)[0].lstrip("+~")


def _parse_seed(override_str: str) -> int | None:
    value = override_str.split("=", 1)[1] if "=" in override_str else ""
    try:
        return int(value)
    except ValueError:
        return None


def _choices(override: Override) -> list[str]:
    key = override.get_key_element()
    if not override.is_sweep_override():
        return [f"{key}={override.get_value_element_as_str()}"]
    if not override.is_discrete_sweep():
        raise UserError(
            f"sweep error: {override.input_line}: the distsim sweeper enumerates lists, range() and glob() only"
        )
    values = [f"{key}={v}" for v in override.sweep_string_iterator()]
    if not values:
        raise UserError(f"sweep error: {override.input_line}: the sweep has no values")
    return values


def plan_sweep(arguments: Sequence[str], parser: OverridesParser | None = None) -> SweepPlan:
    """Parse command-line overrides and expand them into jobs.

    ``parser`` should carry Hydra's config loader (glob() lists a group's options through it).
    """
    parser = parser or OverridesParser.create()
    try:
        parsed = parser.parse_overrides(list(arguments))
    except Exception as err:  # Hydra's OverrideParseException and friends: the user's typing
        raise UserError(f"sweep error: {str(err).splitlines()[0]}") from None
    per_key: dict[str, list[str]] = {}
    runner: list[str] = []
    for override in parsed:
        if override.is_hydra_override():
            continue
        choices = _choices(override)
        key = override.key_or_group
        if key.startswith(RUNNER_PREFIX):
            if len(choices) > 1:
                raise UserError(f"sweep error: {key}: runner settings cannot be swept")
            runner.extend(choices)
            continue
        per_key[override.get_key_element()] = choices  # a repeated key: the last one wins, as in Hydra
    swept = tuple(_key_of(v[0]) for v in per_key.values() if len(v) > 1)
    jobs = []
    for index, combo in enumerate(itertools.product(*per_key.values())):
        seed_ovr = next((o for o in combo if _key_of(o) == SEED_KEY), None)
        config = tuple(o for o in combo if _key_of(o) != SEED_KEY)
        seed = _parse_seed(seed_ovr) if seed_ovr is not None else None
        jobs.append(Job(index, tuple(combo), config, seed, seed_ovr))
    return SweepPlan(jobs, tuple(runner), swept)
