"""Cost escalation: each instance carries a routing cost that grows by the prompt tokens sent to it
and decays exponentially with ``half_life_ms``; route to the cheapest. A stateless-signal balancer
(no instance reports needed) that spreads bursts and forgets old work smoothly."""

import numpy as np

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_min

DEFAULT_HALF_LIFE_MS = 1000.0


@ROUTERS.register("cost_escalation")
class CostEscalation(Router):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        half_life = getattr(cfg, "half_life_ms", None)
        half_life = DEFAULT_HALF_LIFE_MS if half_life is None else half_life
        if not half_life > 0:
            raise ConfigError("policy.routing.half_life_ms", f"must be > 0 (got {half_life!r})")
        self.half_life_us = half_life * 1000.0
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
