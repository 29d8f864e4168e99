"""A cluster-level feature: what the world builder (distsim.world) attaches to a run when the config names
it, and what reports itself once the run is over.

Why one interface: a feature (hedging, MIG, autoscaling, cells, request types, windows, the timeline, ...)
touches a run at a few fixed moments, so it says what it does at each in its own package instead of every
builder, the world and the metrics asking in turn whether it is on. The moments, in order (each a no-op
here, so a feature writes only those it needs):

- ``prepare``: before anything is built (the engines' class, the recorder's);
- ``build``: the one feature that builds the world itself (the cells' fleet) does so here;
- ``attach``: the world is built: listen to it, wrap it, add to it;
- ``run``: the one feature that runs the event loop its own way (a measurement window) does so here;
- ``billing``, ``summarize``: a feature that changes what the fleet is billed or how the whole summary
  is made (autoscaling, a window);
- ``instance_columns``, then ``report`` (summary.json's section named after the feature, in the
  registry's order; it may add request columns) and ``outputs`` (further files of the result);
- ``check_invariants``: raises SimulationError.

A feature's object lives for one run; the builder hands each the same :class:`Parts` and the metrics the
same :class:`Measures`. The module sits at the bottom of the import order and imports nothing of distsim,
not even for types (a field's comment names its type), so any package may hold a feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class Parts:
    """What a world is built of: the resolved settings (``sim`` is None where no run's controls apply, as
    in a test that builds a world by hand), then what the builder and the features make."""

    pools: tuple  # distsim.cluster.pools.PoolSpec, one per vLLM pool
    policy: Any  # distsim.cluster.settings.PolicySettings
    signals: Any
    transfer: Any
    slo: Any
    frontend: Any
    loop: Any  # distsim.events.loop.EventLoop
    recorder: Any  # distsim.metrics.recorder.Recorder (a feature may choose its class in ``prepare``)
    seed: int = 0
    fast_forward: bool = True
    cells: Any = None  # distsim.cells.settings.CellSettings
    runtimes: tuple = ()  # distsim.runtime.settings.RuntimePoolSpec
    typed: bool = False  # request types in play
    sim: Any = None  # distsim.config.settings.SimSettings
    settings: Mapping[str, Any] = field(default_factory=dict)  # a feature's own settings, by its name (distsim.world.Entry)
    instance_cls: type | None = None  # the engines' class (None: distsim.instance.instance.Instance)
    recorder_cls: type | None = None  # the recorder's class, when a feature needs its own (request types)
    world: Any = None  # the world as the run sees it (distsim.protocols.World)
    clusters: list = field(default_factory=list)  # every distsim.cluster.cluster.Cluster in it (one, or a cell's each)
    replicas: list = field(default_factory=list)  # the batching runtimes' replicas, in global order
    features: dict[str, Feature] = field(default_factory=dict)  # the run's features by name, in registry order
    workload: Any = None  # the run's request source (a distsim.workload source, or the list a caller gave)

    def check_invariants(self) -> Any:
        """The world's invariants, then each feature's own (raising SimulationError); what the world returns
        (a cluster's: where each request in flight is)."""
        places = self.world.check_invariants()
        for feature in self.features.values():
            feature.check_invariants()
        return places


@dataclass
class Measures:
    """What the metrics hand each feature at the end of a run: the tables (which a feature may extend), the
    summary so far, and the measured span (the window's, or first arrival to end)."""

    parts: Parts
    table: Any  # requests.parquet's columns (a Table; a DataFrame once a feature needs pandas)
    instances: Any  # instances.parquet's
    summary: dict[str, Any]
    end_us: int  # the run's end
    start_us: int = 0  # the measured span
    stop_us: int = 0
    events: int = 0


class Feature:
    """A cluster-level feature. ``name``: its key in the registry (distsim.world.FEATURES) and its section
    of summary.json, if it writes one."""

    name: ClassVar[str] = ""

    def prepare(self, parts: Parts) -> None:
        """Before the build: choose the engines' or the recorder's class."""

    def build(self, parts: Parts) -> bool:
        """Build the world into ``parts`` (world and clusters) and return True, or leave it to the builder."""
        return False

    def attach(self, parts: Parts) -> None:
        """The world is built: listen to it, wrap it (set ``parts.world``), add to it."""

    def run(self, loop: Any) -> int | None:
        """Run the event loop to its end and return the final time, or None to leave it to the run."""
        return None

    def billing(self, start_us: int, end_us: int) -> Any:
        """Seconds each instance is billed within the span (a numpy array by instance number), or None: the
        whole span for every one."""
        return None

    def summarize(self, m: Measures, bill: Any) -> dict[str, Any] | None:
        """The whole summary made this feature's way (setting the measured span; ``bill(start_us, stop_us)``
        gives what ``billing`` does), or None."""
        return None

    def instance_columns(self, m: Measures) -> None:
        """Add to (or replace) ``m.instances``."""

    def report(self, m: Measures) -> dict[str, Any] | None:
        """summary.json's section named ``name``, or None for none."""
        return None

    def outputs(self, m: Measures) -> dict[str, Any]:
        """Further parts of the result (distsim.simulate.SimulationResult's fields), by field name."""
        return {}

    def check_invariants(self) -> None:
        """Raise SimulationError when the feature's own state is inconsistent."""

