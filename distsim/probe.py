"""A public probe into one run's phases, for scripts that time or weigh them (scripts/bench_cells.py,
scripts/bench_memory.py) instead of patching distsim's functions.

Pass an object with these methods as ``simulate(cfg, probe=...)`` (or ``distsim.simulate.run``); each is
called once, in this order, and may only read what it is given (a probe that changed the world would change
the run). It may subscribe to the world's ``record_listeners`` to hear each request's final status; a
listener that raises abandons the run (a capacity trial whose failure is certain, distsim.metrics.capacity). Subclass :class:`RunProbe` and override what you need. Without a probe a run pays one ``is None``
test per phase, nothing else.

- ``built(world, loop, recorder)``: the world is built, nothing fed or run yet;
- ``ran(world, loop, recorder)``: the events are over and the world has settled, the tables not yet made;
- ``measured(result)``: the :class:`distsim.simulate.SimulationResult`, as ``simulate`` returns it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distsim.events.loop import EventLoop
    from distsim.metrics.recorder import Recorder
    from distsim.metrics.tables import RunWorld


class RunProbe:
    """Does nothing at each phase: override the ones you need."""

    def built(self, world: RunWorld, loop: EventLoop, recorder: Recorder) -> None:
        """The world (a cluster, a fleet of cells, or the runtimes' front over either) is built."""

    def ran(self, world: RunWorld, loop: EventLoop, recorder: Recorder) -> None:
        """The events are over (``loop.events`` of them) and the world settled at the run's end."""

    def measured(self, result: Any) -> None:
        """The run's result (distsim.simulate.SimulationResult): summary, tables, perf."""
