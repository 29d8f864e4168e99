"""Weighted scoring (llm-d's scheduler): each scorer gives every instance a score in [0, 1]; the
weights are normalised; the highest total wins, ties broken from the router's stream. Defaults
follow llm-d: prefix_affinity 3, queue_depth 2, kv_utilization 2. Scores are numpy vectors over the
candidates, so a decision costs a few array operations whatever the cluster size."""

from __future__ import annotations

import math

import numpy as np

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_max
from distsim.policies.scorers import SCORERS

DEFAULT_WEIGHTS = {"prefix_affinity": 3.0, "queue_depth": 2.0, "kv_utilization": 2.0}


@ROUTERS.register("weighted")
class Weighted(Router):
    uses_prefix_index = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        weights = dict(cfg.scorers) if getattr(cfg, "scorers", None) else dict(DEFAULT_WEIGHTS)
        for name, w in weights.items():
            SCORERS.get(name)  # unknown names list the known ones
            if w is None or not math.isfinite(w) or w < 0:
                raise ConfigError(f"policy.routing.scorers.{name}", f"weight must be a finite number >= 0 (got {w!r})")
        total = sum(weights.values())
        if total <= 0:
            raise ConfigError("policy.routing.scorers", "weights must not all be zero")
        items = sorted((name, w) for name, w in weights.items() if w > 0)
        self.scorers = [(SCORERS.get(name)(cfg), w / total) for name, w in items]
        self.uses_prefix_index = any(name == "prefix_affinity" for name, _ in items)
        self.reads_signals = any(s.reads_signals for s, _ in self.scorers)

    def route(self, req, view) -> int:
        total = np.zeros(view.n, dtype=np.float64)
        for scorer, w in self.scorers:
            total += w * scorer.score(req, view)
        self.last_scores = total
        return pick_max(total, self.ctx.rng)
