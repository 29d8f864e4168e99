"""Least KV: the instance with the lowest KV-cache utilisation; ties go to the least loaded."""


from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import load, pick_min


@ROUTERS.register("least_kv")
class LeastKV(Router):
    reads_signals = True

    def route(self, req, view) -> int:
        kv = view.kv_utilization()
        self.last_scores = -kv
        ties = (kv == kv[kv.argmin()]).nonzero()[0]  # the least (argmin: min()'s value, cheaper)
        if ties.size == 1:
            return int(ties[0])
        return int(ties[pick_min(load(view)[ties], self.ctx.rng)])
