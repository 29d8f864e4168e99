"""Power of two choices: sample two distinct instances from the router's stream, take the less
loaded (Mitzenmacher): nearly least_loaded's balance at a fraction of the signal reads, and less
herding under stale signals because the samples differ between decisions."""

from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import load


@ROUTERS.register("power_of_two")
class PowerOfTwo(Router):
    reads_signals = True

    def route(self, req, view) -> int:
        n = view.n
        if n == 1:
            return 0
        a, b = self.ctx.rng.choice(n, size=2, replace=False)
        loads = load(view)
        return int(b) if loads[b] < loads[a] else int(a)
