"""Round-robin routing: instance 0, 1, ..., n-1, 0, ... regardless of load."""

from distsim.policies.base import ROUTERS, Router, positions


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self._next = 0

    def route(self, req, view) -> int:
        i = self._next
        self._next = i + 1 if i + 1 < self.ctx.num_instances else 0
        return i

    def members_changed(self, old, new) -> None:
        """Go on with the candidate after the last one chosen, if it still serves; else from the first."""
        super().members_changed(old, new)
        if self._next >= old.size:
            self._next = 0
        after = positions(old, new)[self._next] if old.size else -1
        self._next = int(after) if after >= 0 else 0
