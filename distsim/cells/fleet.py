"""The fleet of cells: arrivals at the front, the front router, the network, spill-over, and the tokens'
way back. Each cell is a :class:`distsim.cluster.cluster.Cluster` of its own (admission, router, signals,
instances); the fleet offers the same face as a Cluster to the run (distsim.protocols.World).

The path of a request (docs/reading_guide.md):

1. It arrives at the front (an arrival event); the front router picks a cell from the directory.
2. It travels to that cell (half the front's round trip to it, plus jitter); while it does it is on the wire.
3. The cell checks its own live state. Saturated (more outstanding requests per instance than the spill
   threshold) and with hops left, it passes the request on to the least loaded cell the directory shows
   unsaturated, over the cells' own round trip; else it keeps it, and its cluster admits, routes and
   dispatches it as a cluster without cells would.
4. When the cell records the request (completed, rejected, dropped, unfinished), its first and last tokens
   are shifted by the way back to the front (half the round trip, plus jitter): TTFT and E2E are what the
   client sees. At the horizon, requests still on the wire are unfinished.
"""

from __future__ import annotations

import gc
import heapq
import math
from array import array
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from distsim.cells.base import FrontRouter
from distsim.cells.directory import CellDirectory
from distsim.cells.network import Network
from distsim.cells.settings import CellSettings
from distsim.cluster.cluster import Cluster, Intake, decision_table, warn_refusals
from distsim.errors import SimulationError
from distsim.events.loop import PRIO_CLUSTER, EventLoop
from distsim.request import Request, Status

if TYPE_CHECKING:
    import pandas as pd

    from distsim.protocols import RecordSink


class Fleet(Intake):
    """The front, the network and the cells. Assembled by :func:`distsim.cells.build.build_fleet`."""

    def __init__(
        self, cells: list[Cluster], network: Network, directory: CellDirectory, front: FrontRouter,
        settings: CellSettings, loop: EventLoop, recorder: RecordSink,
    ):
        self.cells, self.network, self.directory, self.front = cells, network, directory, front
        self.settings = settings
        self.loop = loop
        self.record_listeners = [recorder.done]  # told of each request's final status, as the client sees it
        for c, cell in enumerate(cells):  # a cell's records come through the fleet (the way back, its counts)
            cell.record_listeners.append(partial(self.recorded, c))
        self.instances = [inst for cell in cells for inst in cell.instances]
        self.pool_of = [pool for cell in cells for pool in cell.pool_of]
        self.max_hops = settings.max_hops
        n = len(cells)
        self.routed = [0] * n  # requests the front sent to each cell
        self.spilled_in = [0] * n  # requests that reached each cell from another
        self.spilled_out = [0] * n  # requests each cell passed on
        self.kept_saturated = [0] * n  # requests each cell took while saturated (no hops left, no cell to spill to)
        self._forced: list[set[int]] = [set() for _ in range(n)]  # of those, the ones still inside
        self.arrived = 0
        self.first_arrival_us: int | None = None
        self.record_ids = array("q")  # request ids as recorded, and the cell that recorded each (-1: none)
        self.record_cells = array("q")
        self.listeners: list[Any] = []  # told of the front's picks and spill-overs (a timeline): front_routed, spilled
        self._wire: dict[int, tuple[Request, int, tuple[int, ...]]] = {}  # id -> (request, its cell, cells passed)
        self._source: Iterator[Request] | None = None
        self._exhausted = False

    # ------------------------------------------------------------------ arrivals at the front
    def feed(self, requests: Iterable[Request]) -> None:
        """Stream requests in, one pending arrival at a time; start the cells' scrapes and summaries."""
        for cell in self.cells:
            cell.board.start(self._active)
        self.directory.start(self._active)
        self._start(requests)

    def _active(self) -> bool:
        return not self._exhausted or self.arrived > len(self.record_ids)

    def accept(self, now: int, req: Request) -> None:
        """A request arrives at the front: the front router picks its cell and sends it there."""
        self.arrived += 1
        cell = self.front.pick(req, self.directory)
        self.routed[cell] += 1
        for listener in self.listeners:
            listener.front_routed(now, req, cell)
        self._send(now, req, cell, self.network.to_cell(cell), ())

    # ------------------------------------------------------------------ the wire and spill-over
    def _send(self, now: int, req: Request, cell: int, delay_us: int, path: tuple[int, ...]) -> None:
        self.directory.note_sent(cell)
        if delay_us:
            self._wire[req.request_id] = (req, cell, path)
            self.loop.schedule(now + delay_us, PRIO_CLUSTER, self._reach, req)
        else:
            self._take(now, req, cell, path)

    def _reach(self, now: int, req: Request) -> None:
        _, cell, path = self._wire.pop(req.request_id)
        self._take(now, req, cell, path)

    def _take(self, now: int, req: Request, cell: int, path: tuple[int, ...]) -> None:
        """``req`` reached ``cell`` having passed through the cells of ``path``: spill it or keep it."""
        directory = self.directory
        if path:
            self.spilled_in[cell] += 1
        if directory.saturated(cell):
            if len(path) < self.max_hops:
                passed = (*path, cell)
                target = directory.spill_target(cell, passed)
                if target is not None:
                    self.spilled_out[cell] += 1
                    for listener in self.listeners:
                        listener.spilled(now, req, cell, target)
                    self._send(now, req, target, self.network.between(cell, target), passed)
                    return
            self.kept_saturated[cell] += 1
            self._forced[cell].add(req.request_id)
        directory.inside[cell] += 1
        self.cells[cell].accept(now, req)

    def recorded(self, cell: int, req: Request) -> None:
        """Cell ``cell`` recorded ``req``: its tokens reach the client after the way back to the front."""
        self.directory.inside[cell] -= 1
        forced = self._forced[cell]
        if forced:
            forced.discard(req.request_id)
        if req.first_token_us >= 0:
            back = self.network.to_front(cell)
            req.first_token_us += back
            if req.completion_us >= 0:
                req.completion_us += back
        self._record(req, cell)

    def _record(self, req: Request, cell: int) -> None:
        self.record_ids.append(req.request_id)
        self.record_cells.append(cell)
        for listener in self.record_listeners:
            listener(req)
        if self._exhausted and len(self.record_ids) == self.arrived:
            owners = [owner for cell in self.cells for owner in cell.timer_owners]
            if owners:  # every request is recorded: pending timers must not prolong the run
                self.loop.drop(*owners)

    # ------------------------------------------------------------------ end of run
    def finish(self, horizon_us: int | None) -> None:
        """Every cell's end of run, then the requests still on the wire are unfinished. What the build froze
        goes back to the garbage collector's oldest generation (distsim.cells.build)."""
        gc.unfreeze()
        for cell in self.cells:
            cell.finish(horizon_us)
        for rid in sorted(self._wire):
            req = self._wire.pop(rid)[0]
            req.status = Status.UNFINISHED
            self._record(req, -1)

    def warn_refusals(self) -> None:
        warn_refusals(self.instances, self.arrived)

    def decision_table(self) -> pd.DataFrame | None:
        """decisions.parquet's rows, every cell's in time order, with policy.trace_decisions; else None."""
        if not self.cells[0].trace:
            return None
        return decision_table(list(heapq.merge(*(cell.decisions for cell in self.cells), key=lambda d: d[0])))

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Each cell's own invariants (INV-1 to INV-15 inside it), then the cell layer's: INV-16 (every
        arrived request in exactly one place), INV-17 (hops and spill counts), INV-18 (a cell's requests
        beyond its threshold are only those it could not pass on). Raises SimulationError."""
        places: dict[int, str] = {}
        for rid, (_, cell, path) in self._wire.items():
            if len(path) > self.max_hops:
                raise SimulationError(f"INV-17: request {rid} passed {len(path)} cells > max_hops {self.max_hops}")
            places[rid] = f"on the wire to cell {cell}"
        for c, cell in enumerate(self.cells):
            inside = cell.check_invariants()
            if len(inside) != self.directory.inside[c]:
                raise SimulationError(f"INV-16: cell {c} holds {len(inside)} requests, the directory counts {self.directory.inside[c]}")
            for rid, where in inside.items():
                if rid in places:
                    raise SimulationError(f"INV-16: request {rid} both {places[rid]} and in cell {c} ({where})")
                places[rid] = f"cell {c}: {where}"
            self._check_capacity(c, inside)
        recorded = len(self.record_ids)
        if self.arrived != recorded + len(places) or sum(self.routed) != self.arrived:
            raise SimulationError(
                f"INV-16: requests not conserved: {self.arrived} arrived (front routed {sum(self.routed)}) != "
                f"{recorded} recorded + {len(places)} in flight"
            )
        spilling = sum(1 for _, _, path in self._wire.values() if path)
        if sum(self.spilled_out) != sum(self.spilled_in) + spilling:
            raise SimulationError(
                f"INV-17: {sum(self.spilled_out)} spilled out != {sum(self.spilled_in)} spilled in + {spilling} spilling"
            )

    def _check_capacity(self, c: int, inside: dict[int, str]) -> None:
        forced = self._forced[c]
        if not forced <= inside.keys():
            raise SimulationError(f"INV-18: cell {c} counts requests kept while saturated that it no longer holds")
        capacity = self.directory.capacity[c]
        if math.isfinite(capacity) and len(inside) - len(forced) > math.floor(capacity) + 1:
            raise SimulationError(
                f"INV-18: cell {c} holds {len(inside)} requests, {len(forced)} of them kept while saturated: "
                f"more than its threshold allows ({math.floor(capacity)} + 1)"
            )
