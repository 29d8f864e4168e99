"""Least loaded: the instance with the fewest queued + running + in-transit requests (BLIS's
definition). Queue and batch come from possibly stale signals; under heavy staleness every router
decision between two refreshes sees the same minimum, so least_loaded herds (tests show it)."""

from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import load, pick_min


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    reads_signals = True

    def route(self, req, view) -> int:
        loads = load(view)
        self.last_scores = -loads
        return pick_min(loads, self.ctx.rng)
