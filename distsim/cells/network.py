"""Round trips between the front and the cells, and between cells: Vivaldi-style coordinates.

As in Vivaldi (Dabek et al., SIGCOMM 2004) and the InferMesh seed, every node (each cell, and the front)
has a point in a ``dims``-dimensional Euclidean space plus a non-negative height, the delay of its access
link; the round trip between two nodes is the distance between their points plus both heights. Points are
drawn uniformly in [0, spread_ms] per axis and heights uniformly in [0, height_ms], from the
"cells/coordinates" stream, so a seed fixes the topology. A message takes half its round trip one way (the
forward half rounded down, the return half the rest, so there and back is the round trip exactly), plus a
jitter drawn uniformly in [0, jitter_us] from the "cells/jitter" stream, per message. Times are integer
microseconds; a node's round trip to itself is 0.
"""

from __future__ import annotations

import numpy as np

from distsim.cells.settings import CellSettings
from distsim.events.rng import stream

_BLOCK = 4096  # jitter draws per numpy call


class Network:
    def __init__(self, settings: CellSettings, seed: int):
        n = settings.count
        self.front = n  # the front's node number; cells are 0 .. n-1
        rng = stream(seed, "cells/coordinates")
        points = rng.random((n + 1, settings.dims)) * settings.spread_ms
        heights = rng.random(n + 1) * settings.height_ms
        distance = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
        rtt_ms = distance + heights[:, None] + heights[None, :]
        np.fill_diagonal(rtt_ms, 0.0)
        self.rtt_us = np.rint(rtt_ms * 1000.0).astype(np.int64)  # (cells + 1) x (cells + 1)
        self.front_rtt_us = self.rtt_us[self.front, :n].copy()
        self._out = (self.front_rtt_us // 2).tolist()  # front -> cell, per cell
        self._back = (self.front_rtt_us - self.front_rtt_us // 2).tolist()  # cell -> front
        self.jitter_us = settings.jitter_us
        self._rng = stream(seed, "cells/jitter")
        self._draws: list[int] = []

    def _jitter(self) -> int:
        if not self.jitter_us:
            return 0
        if not self._draws:
            self._draws = self._rng.integers(0, self.jitter_us + 1, size=_BLOCK).tolist()[::-1]
        return self._draws.pop()

    def to_cell(self, cell: int) -> int:
        """Microseconds a request takes from the front to ``cell``."""
        return self._out[cell] + self._jitter()

    def between(self, src: int, dst: int) -> int:
        """Microseconds a request takes from cell ``src`` to cell ``dst`` (a spill)."""
        return int(self.rtt_us[src, dst]) // 2 + self._jitter()

    def to_front(self, cell: int) -> int:
        """Microseconds the tokens take from ``cell`` back to the front (the client)."""
        return self._back[cell] + self._jitter()
