"""Always busiest: the instance with the most queued + running + in-transit requests, the mirror image
of least_loaded (BLIS's pathological ``always-busiest``). Nobody would deploy it: it exists so a test or
a sweep has a policy known to be bad, and a fitness, a ranking or a search that cannot tell it from a
good one is wrong. Ties (an idle fleet) are broken from the router's stream, so it does not always
start on instance 0."""

from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import load, pick_max


@ROUTERS.register("always_busiest")
class AlwaysBusiest(Router):
    reads_signals = True

    def route(self, req, view) -> int:
        loads = load(view)
        self.last_scores = loads
        return pick_max(loads, self.ctx.rng)
