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
from distsim.events.collector import fewer_collections
from distsim.events.loop import EventLoop
from distsim.metrics.columns import Table
from distsim.metrics.fitness import compute_fitness
from distsim.metrics.recorder import Recorder
from distsim.metrics.tables import measure
from distsim.progress import ProgressLine, ProgressSettings, expected_end_us, expected_requests
from distsim.request import Request
from distsim.resolve import Scenario, resolve
from distsim.workload.base import WorkloadSource
from distsim.world import build

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

    from distsim.probe import RunProbe


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
            from distsim.timeline.trace import trace_json

            outputs.write_text(out / "timeline.json", trace_json(self.timeline_trace))
        outputs.write_text(out / "perf.json", json.dumps(self.perf, indent=2) + "\n")
        outputs.write_text(out / "summary.json", summary_json(self.summary))


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def simulate(
    cfg: DictConfig, requests: Iterable[Request] | None = None, *, progress: bool | ProgressSettings = False,
    probe: RunProbe | None = None,
) -> SimulationResult:
    """Run the simulation that ``cfg`` (a composed config, see load_config) describes.

    ``requests`` replaces the configured workload (tests and validation feed exact request lists).
    The whole config is resolved and checked (distsim.resolve.resolve) before anything is
    built, so a mistake anywhere stops before the first event. ``progress``: draw a progress line on
    stderr while the events run (distsim.progress; ``python -m distsim`` sets it from sim.progress).
    ``probe``: told of each phase, built, ran and measured (distsim.probe).
    """
    started = (time.perf_counter(), time.process_time())
    return run(resolve(cfg, requests), started=started, progress=progress, probe=probe)


def run(
    scenario: Scenario, *, started: tuple[float, float] | None = None, progress: bool | ProgressSettings = False,
    probe: RunProbe | None = None,
) -> SimulationResult:
    """Build the world from a resolved scenario, simulate it, and measure. ``started``: the wall and
    CPU clocks when the caller began (perf.json then includes resolving); ``progress``, ``probe``: as simulate's."""
    wall0, cpu0 = started or (time.perf_counter(), time.process_time())
    sim = scenario.sim
    workload = scenario.workload  # a list the caller gave, or a configured source (a trace's: rows read, skipped)
    workload_summary = workload.summary() if isinstance(workload, WorkloadSource) else None
    loop = EventLoop(sim.horizon_us)
    parts = build(scenario, loop)  # the world, with the features the config names (distsim.world)
    world, recorder = parts.world, parts.recorder
    if probe is not None:
        probe.built(world, loop, recorder)
    world.feed(scenario.workload)
    with _progress_line(progress, scenario, loop, recorder), fewer_collections():
        # a feature may run the loop its own way (a measurement window pauses at its edges)
        end_us = next((t for f in parts.features.values() if (t := f.run(loop)) is not None), None)
        if end_us is None:
            end_us = loop.run()
    world.finish(sim.horizon_us)
    world.warn_refusals()
    if probe is not None:
        probe.ran(world, loop, recorder)
    m = measure(parts, loop, end_us)
    summary = m.summary
    if workload_summary is not None:
        summary["workload"] = workload_summary
    if scenario.fitness.kind == "capacity":  # reruns the scenario at other loads (distsim.metrics.capacity)
        from distsim.metrics.capacity import capacity

        summary["capacity"] = capacity(scenario, summary, lambda trial, probe: run(trial, probe=probe).summary)
    summary["fitness"] = compute_fitness(summary, scenario.fitness)
    summary["prediction_interval"] = prediction_interval(summary, scenario)
    del summary["_derived"]
    extra: dict[str, Any] = {}  # what the features add to the result (cells.parquet, timeline.json, ...)
    for feature in parts.features.values():
        extra.update(feature.outputs(m))
    perf = perf_figures(wall0, cpu0, loop.events, len(m.table))
    result = SimulationResult(summary, m.table, m.instances, perf, world.decision_table(), **extra)
    if probe is not None:
        probe.measured(result)
    return result


def prediction_interval(summary: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """summary.json's ``prediction_interval``: each latency figure's 90% interval from the step model's
    held-out errors on the pools' GPUs and model families (distsim.catalog.intervals)."""
    from distsim.catalog.intervals import family_of, summary_section

    return summary_section(summary, [(p.hardware.name, family_of(p.model)) for p in scenario.pools])


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
