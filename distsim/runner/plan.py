"""Expand a sweep into jobs with Hydra's own override grammar (comma lists, range(), glob()).

Jobs are the cartesian product of the overrides, in Hydra's basic-sweeper order (keys in command-line
order, the last key varying fastest), so job indices match what ``hydra/sweeper=basic`` would number.
A job's *config* is its overrides but ``seed``: jobs sharing a config differ only by seed, so the driver
composes each config once and derives each job by setting the seed. Overrides are typed pairs
(distsim.runner.overrides), parsed here once; their text is for display and identity only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser

from distsim.errors import UserError
from distsim.runner.overrides import Override, expand, joined, parse

SEED_KEY = "seed"
RUNNER_PREFIX = "runner."


@dataclass(frozen=True)
class Job:
    """One simulation of a sweep. ``overrides`` identify it (runner.* settings excluded)."""

    index: int
    overrides: tuple[Override, ...]
    config: tuple[Override, ...]  # overrides but seed
    seed: int | None  # the seed override as an int; None when absent or not an integer literal
    seed_override: Override | None  # the seed override, if any

    @property
    def config_key(self) -> str:
        return joined(self.config)

    @property
    def overrides_str(self) -> str:
        return joined(self.overrides)


@dataclass(frozen=True)
class SweepPlan:
    jobs: list[Job]
    runner_overrides: tuple[Override, ...]  # runner.* overrides, the same for every job
    swept_keys: tuple[str, ...]  # keys with more than one value (seed included)
    # resolve every configuration before the first job, so a bad value stops the sweep; the search turns
    # it off, since an invalid candidate is a result there (it scores as failed), not a reason to stop
    check_configs: bool = True

    def configs(self) -> dict[str, tuple[Override, ...]]:
        """Distinct configs in order of first appearance."""
        out: dict[str, tuple[Override, ...]] = {}
        for job in self.jobs:
            out.setdefault(job.config_key, job.config)
        return out

    def config_texts(self) -> dict[str, tuple[str, ...]]:
        """Each config's overrides as text, by config key: what labels and the printed table show."""
        return {key: tuple(o.text for o in config) for key, config in self.configs().items()}


def seed_of(override: Override) -> int | None:
    """An integer seed; anything else (an interpolation, a float) is left for Hydra to compose."""
    value = override.value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def make_job(index: int, overrides: Sequence[Override]) -> Job:
    seed_ovr = next((o for o in overrides if o.key == SEED_KEY), None)
    config = tuple(o for o in overrides if o.key != SEED_KEY)
    seed = seed_of(seed_ovr) if seed_ovr is not None else None
    return Job(index, tuple(overrides), config, seed, seed_ovr)


def plan_sweep(arguments: Sequence[str], parser: OverridesParser | None = None) -> SweepPlan:
    """Parse command-line overrides and expand them into jobs.

    ``parser`` should carry Hydra's config loader (glob() lists a group's options through it).
    """
    per_key: dict[str, list[Override]] = {}
    runner: list[Override] = []
    for parsed in parse(arguments, parser):
        if parsed.is_hydra_override():
            continue
        choices = expand(parsed)
        if parsed.key_or_group.startswith(RUNNER_PREFIX):
            if len(choices) > 1:
                raise UserError(f"sweep error: {parsed.key_or_group}: runner settings cannot be swept")
            runner.extend(choices)
            continue
        per_key[choices[0].element] = choices  # a repeated key: the last one wins, as in Hydra
    swept = tuple(v[0].key for v in per_key.values() if len(v) > 1)
    jobs = [make_job(i, combo) for i, combo in enumerate(itertools.product(*per_key.values()))]
    return SweepPlan(jobs, tuple(runner), swept)
