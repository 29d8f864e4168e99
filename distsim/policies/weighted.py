"""Weighted scoring (llm-d's scheduler): each scorer gives every instance a score in [0, 1]; the
weights are normalised; the highest total wins, ties broken from the router's stream. Defaults
follow llm-d: prefix_affinity 3, queue_depth 2, kv_utilization 2. Scores are numpy vectors over the
candidates, so a decision costs a few array operations whatever the cluster size."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_max
from distsim.policies.prefix_affinity import PrefixParams
from distsim.policies.scorers import SCORERS

DEFAULT_WEIGHTS = {"prefix_affinity": 3.0, "queue_depth": 2.0, "kv_utilization": 2.0}


@dataclass(frozen=True)
class WeightedParams(PrefixParams):
    scorers: dict[str, float] | None = None  # scorer name -> weight ({} or None: llm-d's defaults)

    def weights(self) -> dict[str, float]:
        return dict(self.scorers) if self.scorers else dict(DEFAULT_WEIGHTS)

    def check(self, key: str) -> None:
        super().check(key)
        weights = self.weights()
        for name, w in weights.items():
            SCORERS.get(name)  # unknown names list the known ones
            if w is None or not math.isfinite(w) or w < 0:
                raise ConfigError(f"{key}.scorers.{name}", f"weight must be a finite number >= 0 (got {w!r})")
        if sum(weights.values()) <= 0:
            raise ConfigError(f"{key}.scorers", "weights must not all be zero")


@ROUTERS.register("weighted")
class Weighted(Router):
    Params = WeightedParams
    uses_prefix_index = True

    def __init__(self, params: WeightedParams, ctx):
        super().__init__(params, ctx)
        weights = params.weights()
        total = sum(weights.values())
        items = sorted((name, w) for name, w in weights.items() if w > 0)
        self.scorers = [(SCORERS.get(name)(params), w / total) for name, w in items]
        self.reads_signals = any(s.reads_signals for s, _ in self.scorers)

    @classmethod
    def reads_prefix_index(cls, params: WeightedParams) -> bool:
        return params.weights().get("prefix_affinity", 0) > 0

    def route(self, req, view) -> int:
        scorers = self.scorers
        first, w = scorers[0]
        # the first weighted score is the sum so far (0.0 + x == x: scores are never -0.0), one copy less
        total = np.multiply(first.score(req, view), w, dtype=np.float64)
        for scorer, w in scorers[1:]:
            total += w * scorer.score(req, view)
        self.last_scores = total
        return pick_max(total, self.ctx.rng)
