"""The ``fitness`` section checked into :class:`FitnessSettings`: which one number a run gives (resolve, then
build: distsim.metrics.fitness computes it from the summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from distsim.config.validators import warn_unread
from distsim.metrics.fitness import FITNESS, check_fitness

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class FitnessSettings:
    """One number per run (distsim.metrics.fitness): ``kind`` goodput (``per`` gpu, dollar or none)
    or weighted (metric ``weights`` and reference values ``refs``)."""

    kind: str = "goodput"
    per: str = "gpu"
    weights: dict[str, float] = field(default_factory=dict)
    refs: dict[str, float] = field(default_factory=dict)


def fitness(cfg: DictConfig) -> FitnessSettings:
    """``fitness.*``, checked against the fitness form's own rules (distsim.metrics.fitness)."""
    FITNESS.get(cfg.kind)
    own = {"goodput": ("kind", "per"), "weighted": ("kind", "weights", "refs")}
    if cfg.kind in own:
        warn_unread(cfg, "fitness", own[cfg.kind], f"the fitness {cfg.kind!r} does not use it", {"per": "gpu"})
    settings = FitnessSettings(str(cfg.kind), str(cfg.per), dict(cfg.weights or {}), dict(cfg.refs or {}))
    check_fitness(settings)
    return settings
