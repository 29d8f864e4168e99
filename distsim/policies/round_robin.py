"""Round-robin routing: instance 0, 1, ..., n-1, 0, ... regardless of load."""

from distsim.policies.base import ROUTERS, Router


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self._next = 0

    def route(self, req, view) -> int:
        i = self._next
        self._next = i + 1 if i + 1 < self.ctx.num_instances else 0
        return i
