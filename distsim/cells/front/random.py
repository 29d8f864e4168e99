"""A uniformly random cell, from the front's own stream (drawn in blocks: one numpy call per 4,096)."""

from distsim.cells.base import FrontRouter
from distsim.cells.registry import FRONTS

_BLOCK = 4096


@FRONTS.register("random")
class RandomFront(FrontRouter):
    def __init__(self, ctx):
        super().__init__(ctx)
        self._draws: list[int] = []

    def pick(self, req, cells) -> int:
        if not self._draws:
            self._draws = self.ctx.rng.integers(0, self.ctx.cells, size=_BLOCK).tolist()[::-1]
        return self._draws.pop()
