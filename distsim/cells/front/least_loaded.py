"""The cell with the fewest outstanding requests per instance: its last summary's count plus the requests
the front has sent it since that summary arrived (the front counts its own sends, so a stale summary does
not send a burst to one cell); ties broken from the front's stream."""

from distsim.cells.base import FrontRouter
from distsim.cells.registry import FRONTS
from distsim.policies.choice import pick_min


@FRONTS.register("least_loaded")
class LeastLoadedFront(FrontRouter):
    def pick(self, req, cells) -> int:
        return pick_min(cells.estimated_load(), self.ctx.rng)
