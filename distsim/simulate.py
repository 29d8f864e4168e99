"""One whole simulation: resolve the composed config into a scenario, build the world from it, run,
measure."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distsim import outputs
from distsim.cells.build import build_world
from distsim.cells.fleet import Fleet
from distsim.cluster.cluster import Cluster
from distsim.events.loop import EventLoop
from distsim.instance.instance import Instance
from distsim.metrics.columns import Table
from distsim.metrics.fitness import compute_fitness
from distsim.metrics.recorder import Recorder
from distsim.metrics.tables import measure
from distsim.metrics.window import WindowProbe
from distsim.progress import ProgressLine, ProgressSettings, expected_end_us, expected_requests
from distsim.request import Request
from distsim.resolve import Scenario, resolve
from distsim.workload.base import WorkloadSource

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

    from distsim.metrics.tables import RunWorld
    from distsim.metrics.timeline import Timeline


@dataclass
class SimulationResult:
    """A run's figures and tables. ``requests`` and ``instances`` are pandas DataFrames (the columns of
    requests.parquet and instances.parquet), built on first access from the run's column tables, so a
    run that only writes its files never imports pandas."""

    summary: dict[str, Any]
    request_table: Table | pd.DataFrame
    instance_table: Table | pd.DataFrame
    perf: dict[str, Any] = field(default_factory=dict)
    decisions: pd.DataFrame | None = None  # per routing decision, when policy.trace_decisions is on
    cells: pd.DataFrame | None = None  # per cell, with a cell layer (cluster.cells.count > 1)
    timeline: Table | None = None  # autoscaled pools' replicas over time, with autoscaling
    timeline_trace: dict[str, Any] | None = None  # the schedule as a Chrome trace, with sim.timeline (timeline.json)

    @property
    def requests(self) -> pd.DataFrame:
        if isinstance(self.request_table, Table):
            self.request_table = self.request_table.to_pandas()
        return self.request_table

    @property
    def instances(self) -> pd.DataFrame:
        if isinstance(self.instance_table, Table):
            self.instance_table = self.instance_table.to_pandas()
        return self.instance_table

    def write(self, out_dir: str | os.PathLike, *, write_requests: bool = True) -> None:
        """requests.parquet, instances.parquet, decisions.parquet, timeline.json, perf.json, then summary.json
        into ``out_dir``.

        Each file is written atomically (distsim.outputs) and summary.json last, after removing an earlier
        run's, so a complete summary.json means a complete run. Files an earlier run left there that this
        one does not write are removed, so the directory never mixes two runs; a write that fails or is
        interrupted removes the files this one wrote before it (outputs.all_or_none). Raises OutputError.
        """
        out = outputs.prepare_dir(out_dir)
        with outputs.all_or_none():
            self._write(out, write_requests)

    def _write(self, out: Path, write_requests: bool) -> None:
        skipped = [] if write_requests else ["requests.parquet"]
        skipped += [] if self.decisions is not None else ["decisions.parquet"]
        skipped += [] if self.cells is not None else ["cells.parquet"]
        skipped += [] if self.timeline is not None else ["instances_timeline.parquet"]
        skipped += [] if self.timeline_trace is not None else ["timeline.json"]
        outputs.remove(out / name for name in ("summary.json", *skipped))
        if write_requests:
            outputs.write_parquet(out / "requests.parquet", self.request_table)
        outputs.write_parquet(out / "instances.parquet", self.instance_table)
        if self.decisions is not None:
            outputs.write_parquet(out / "decisions.parquet", self.decisions)
        if self.cells is not None:
            outputs.write_parquet(out / "cells.parquet", self.cells)
        if self.timeline is not None:
            outputs.write_parquet(out / "instances_timeline.parquet", self.timeline)
        if self.timeline_trace is not None:
            from distsim.metrics.timeline import trace_json

            outputs.write_text(out / "timeline.json", trace_json(self.timeline_trace))
        outputs.write_text(out / "perf.json", json.dumps(self.perf, indent=2) + "\n")
        outputs.write_text(out / "summary.json", summary_json(self.summary))


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def simulate(
    cfg: DictConfig, requests: Iterable[Request] | None = None, *, progress: bool | ProgressSettings = False
) -> SimulationResult:
    """Run the simulation that ``cfg`` (a composed config, see load_config) describes.

    ``requests`` replaces the configured workload (tests and validation feed exact request lists).
    The whole config is resolved and checked (distsim.resolve.resolve) before anything is
    built, so a mistake anywhere stops before the first event. ``progress``: draw a progress line on
    stderr while the events run (distsim.progress; ``python -m distsim`` sets it from sim.progress).
    """
    started = (time.perf_counter(), time.process_time())
    return run(resolve(cfg, requests), started=started, progress=progress)


def run(
    scenario: Scenario, *, started: tuple[float, float] | None = None, progress: bool | ProgressSettings = False
) -> SimulationResult:
    """Build the world from a resolved scenario, simulate it, and measure. ``started``: the wall and
    CPU clocks when the caller began (perf.json then includes resolving); ``progress``: as simulate's."""
    wall0, cpu0 = started or (time.perf_counter(), time.process_time())
    sim = scenario.sim
    workload = scenario.workload  # a list the caller gave, or a configured source (a trace's: rows read, skipped)
    workload_summary = workload.summary() if isinstance(workload, WorkloadSource) else None
    loop = EventLoop(sim.horizon_us)
    recorder = _recorder(scenario)
    timeline, instance_cls = _timeline(scenario)
    world = _build(scenario, loop, recorder, timeline, instance_cls)
    world.feed(scenario.workload)
    probe = WindowProbe(sim.window) if sim.window is not None else None  # a measurement window
    with _progress_line(progress, scenario, loop, recorder):
        end_us = loop.run() if probe is None else probe.run(loop, world, sim.horizon_us)
    world.finish(sim.horizon_us)
    world.warn_refusals()
    table, instances, summary = measure(world, recorder, loop, end_us, sim.seed, probe)
    cells = None
    if isinstance(world, Fleet):  # a cell layer adds its columns to the DataFrames
        from distsim.metrics.cells import measure_cells

        table, instances = table.to_pandas(), instances.to_pandas()
        cells = measure_cells(world, table, instances, summary)
    if workload_summary is not None:
        summary["workload"] = workload_summary
    summary["fitness"] = compute_fitness(summary, scenario.fitness)
    del summary["_derived"]
    trace = timeline.trace(world, table, end_us, sim.seed) if timeline is not None else None
    perf = perf_figures(wall0, cpu0, loop.events, len(table))
    decisions = world.decision_table() if world.trace else None
    replicas = None
    if world.autoscaler is not None:
        from distsim.metrics.autoscale import timeline_table

        replicas = timeline_table(world.autoscaler)
    return SimulationResult(summary, table, instances, perf, decisions, cells, replicas, trace)


def _build(scenario: Scenario, loop: EventLoop, recorder: Recorder, timeline: Timeline | None,
           instance_cls: type[Instance]) -> RunWorld:
    """The world: the cluster or the fleet of cells (the timeline listening, if any), and with runtime
    pools the front that routes requests by type over it."""
    sim = scenario.sim
    built = build_world(
        scenario.pools, scenario.policy, scenario.signals, scenario.transfer, loop, recorder,
        seed=sim.seed, fast_forward=sim.fast_forward, slo=scenario.slo, frontend=scenario.frontend,
        cells=scenario.cells, instance_cls=instance_cls,
    )
    if timeline is not None:
        timeline.attach(built)
    if not scenario.runtimes:
        return built
    from distsim.runtime.build import attach_runtimes  # batching runtimes for non-LLM request types

    assert isinstance(built, Cluster)  # resolve refuses runtime pools with cells (distsim.runtime.checks)
    return attach_runtimes(built, scenario.runtimes, scenario.policy, scenario.signals, loop, recorder,
                           seed=sim.seed, ttft_slo_ms=scenario.slo.ttft_ms)


def _timeline(scenario: Scenario) -> tuple[Timeline | None, type[Instance]]:
    """With sim.timeline: the timeline (distsim.metrics.timeline) and the engines it listens to
    (ObservedInstance); else none, and plain engines that pay nothing per step for it."""
    if scenario.sim.timeline is None:
        return None, Instance
    from distsim.instance.observed import ObservedInstance
    from distsim.metrics.timeline import Timeline

    return Timeline(scenario.sim.timeline), ObservedInstance


def _recorder(scenario: Scenario) -> Recorder:
    """The recorder; with request types in play, the one that adds their columns (distsim.metrics.types)."""
    args = (scenario.slo.ttft_ms, scenario.slo.tpot_ms, scenario.frontend.output_lag_us)
    if scenario.typed:
        from distsim.metrics.types import TypedRecorder

        return TypedRecorder(*args)
    return Recorder(*args)


def _progress_line(
    progress: bool | ProgressSettings, scenario: Scenario, loop: EventLoop, recorder: Recorder
) -> contextlib.AbstractContextManager:
    """The progress line around the event loop (a thread reading the loop and the recorder), or nothing."""
    if not progress:
        return contextlib.nullcontext()
    return ProgressLine(
        lambda: loop.now,
        loop.events_run,
        lambda: len(recorder),
        total=expected_requests(scenario.workload),
        end_us=expected_end_us(scenario.workload, scenario.sim.horizon_us),
        settings=progress if isinstance(progress, ProgressSettings) else None,
    )


def perf_figures(wall0: float, cpu0: float, events: int, requests: int) -> dict[str, Any]:
    """perf.json: figures that vary from run to run, so they never enter summary.json."""
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    return {
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "events": events,
        "events_per_s": round(events / wall, 1) if wall > 0 else None,
        "requests_per_cpu_s": round(requests / cpu, 1) if cpu > 0 else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
