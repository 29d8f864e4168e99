"""The front router's interface: it picks a cell for each arriving request from what the directory
(:class:`distsim.cells.directory.CellDirectory`) says about the cells, never from a cell itself.

A front router decides on what a real global load balancer could know: the cells' last summaries (their
outstanding requests, possibly stale), the requests it has sent each cell since, the cells' sizes and its
round-trip times to them. Like every policy it draws randomness only from its own stream, and it never
reads a request's output length (INV-9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from distsim.request import Request

if TYPE_CHECKING:
    from distsim.cells.directory import CellDirectory


@dataclass
class FrontContext:
    """What a front router may be built from."""

    cells: int
    rng: np.random.Generator  # the front's own stream ("cells/front")


class FrontRouter:
    """Chooses the cell for an arriving request."""

    def __init__(self, ctx: FrontContext):
        self.ctx = ctx

    def pick(self, req: Request, cells: CellDirectory) -> int:
        """The index of the cell that gets ``req``; ``cells`` is the directory."""
        raise NotImplementedError
