"""Round robin over the cells: 0, 1, ..., n-1, 0, ... whatever their load."""

from distsim.cells.base import FrontRouter
from distsim.cells.registry import FRONTS


@FRONTS.register("round_robin")
class RoundRobinFront(FrontRouter):
    def __init__(self, ctx):
        super().__init__(ctx)
        self._next = 0

    def pick(self, req, cells) -> int:
        i = self._next
        self._next = i + 1 if i + 1 < self.ctx.cells else 0
        return i
