"""The cell with the lowest round trip from the front among those not known to be saturated (by their
last summaries; with no spill threshold no cell is ever saturated); all of them when every cell is.
It reads only the summaries, not its own sends: between two summaries it sends everything to one cell,
which is the herding a stale summary causes, and what spill-over is for. Ties broken from its stream."""

import numpy as np

from distsim.cells.base import FrontRouter
from distsim.cells.registry import FRONTS
from distsim.policies.choice import pick_min


@FRONTS.register("nearest")
class NearestFront(FrontRouter):
    def pick(self, req, cells) -> int:
        open_ = np.flatnonzero(~cells.reported_saturated())
        rtt = cells.front_rtt_us
        if open_.size == 0 or open_.size == rtt.size:
            return pick_min(rtt, self.ctx.rng)
        return int(open_[pick_min(rtt[open_], self.ctx.rng)])
