"""Cost escalation: each instance carries a routing cost that grows by the prompt tokens sent to it
and decays exponentially with ``half_life_ms``; route to the cheapest. A stateless-signal balancer
(no instance reports needed) that spreads bursts and forgets old work smoothly."""

from dataclasses import dataclass

import numpy as np

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, PolicyParams, Router, positions
from distsim.policies.choice import pick_min


@dataclass(frozen=True)
class CostEscalationParams(PolicyParams):
    half_life_ms: float = 1000.0  # half-life of an instance's routing cost

    def check(self, key: str) -> None:
        if not self.half_life_ms > 0:
            raise ConfigError(f"{key}.half_life_ms", f"must be > 0 (got {self.half_life_ms!r})")


@ROUTERS.register("cost_escalation")
class CostEscalation(Router):
    Params = CostEscalationParams

    def __init__(self, params: CostEscalationParams, ctx):
        super().__init__(params, ctx)
        self.half_life_us = params.half_life_ms * 1000.0
        self.cost = np.zeros(ctx.num_instances, dtype=np.float64)
        self.last_us = 0

    def route(self, req, view) -> int:
        now = view.now
        if now != self.last_us:
            self.cost *= 0.5 ** ((now - self.last_us) / self.half_life_us)
            self.last_us = now
        self.last_scores = -self.cost
        choice = pick_min(self.cost, self.ctx.rng)
        self.cost[choice] += req.prompt_tokens
        return choice

    def members_changed(self, old, new) -> None:
        """Each instance keeps its cost while it serves; a new candidate starts at zero."""
        super().members_changed(old, new)
        cost = np.zeros(new.size, dtype=np.float64)
        where = positions(old, new)
        kept = where >= 0
        cost[where[kept]] = self.cost[kept]
        self.cost = cost
