"""Uniform random routing from the router's own RNG stream (drawn in blocks for speed)."""

from distsim.policies.base import ROUTERS, Router

_BLOCK = 4096


@ROUTERS.register("random")
class RandomRouter(Router):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self._draws: list[int] = []
        self._i = 0

    def route(self, req, view) -> int:
        if self._i == len(self._draws):
            self._draws = self.ctx.rng.integers(0, self.ctx.num_instances, size=_BLOCK).tolist()
            self._i = 0
        choice = self._draws[self._i]
        self._i += 1
        return choice

    def members_changed(self, old, new) -> None:
        """The drawn block was for the old count: draw the next block over the new one."""
        super().members_changed(old, new)
        self._draws, self._i = [], 0
