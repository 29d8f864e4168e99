"""The measurement window applied to a run's figures (the window itself: distsim.metrics.settings).

The rules, one per kind of figure:

- **Per-request figures** (counts by status, TTFT, TPOT, E2E, queueing, SLO attainment, goodput, the
  prefix cache hit rate, tenant fairness, SLO classes, the tokens cost is divided by) count the measured
  requests only: those arriving in the window. A measured request still in flight when the run stops
  is unfinished and counts against attainment, as without a window.
- **Rates** (throughput, goodput per second, tokens per second) divide by the *measured span*: from the
  window's start (or the first arrival, if later) to its end (or the end of the run, if earlier). An open
  window (measure_s null) runs to the end of the run, as a run without a window does. In steady state
  the measured requests' completions per second of that span is the served rate; the requests that
  arrive in the window and finish after it stand for those that arrived before it and finished inside.
- **Fleet figures** (GPU utilisation, inter-token latency, cost): the work of the steps that *end*
  inside the span, whichever request they served (ITL is a per-token figure kept per instance, with no
  request identity: the token gaps of those steps). To read them the event loop pauses at the window's
  edges (nothing runs there, so the run is the same) and each instance's counters are snapshotted: busy
  time of the steps ended by then (the ended steps of a fast-forwarded run in flight included), and how
  many single steps and recompute gaps it has recorded; a fast-forwarded run keeps every step's end
  time, so its gaps are picked by time. Cost is the fleet's price over the span. A batching runtime's
  replica (distsim.runtime) is snapshotted the same way: its busy time credited at batch ends, so the
  window counts the busy time of the batches *ending* inside the span; ``types``' batch figures count
  those batches.
- **Per type** (``types``, with request types in play): the measured requests of each type, rates over
  the measured span, and the batches ending inside the span.
- **Whole run**: instances.parquet, and summary.json's ``cpu_kv``, ``kv_transfer``, ``signals``,
  ``cells`` and ``workload``; ``sim.simulated_s`` stays the run's own length. With hedging, its section
  counts the measured requests (distsim.hedging.report reads the column). With autoscaling, cost and
  GPU-hours follow the replicas billed within the span and ``autoscale``'s scale counts and peak are the
  run's (tests/test_windows.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.errors import warn_config
from distsim.events.loop import EventLoop
from distsim.feature import Feature, Measures, Parts
from distsim.metrics.columns import Table
from distsim.metrics.settings import MeasureWindow
from distsim.metrics.summary import cpu_kv_counts, is_status, rnd, summarize
from distsim.metrics.tables import Tally

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.protocols import BatchingReplica


@dataclass(frozen=True)
class Counters:
    """An instance's counters at an instant: busy time of the steps ended by then, single steps and
    recompute gaps recorded."""

    busy_us: int
    steps: int
    singles: int


def counters_at(inst: Instance, now: int) -> Counters:
    stats, plan = inst.stats, inst.plan
    busy = stats.busy_us
    ends = plan.ends_us
    if plan.steps and ends is not None:  # a fast-forwarded run in flight: its steps ended by now
        k = bisect_right(ends, now, 0, plan.steps)
        if k:
            busy += ends[k - 1] - plan.begin_us
    return Counters(busy, len(stats.itl_step_durations), len(stats.itl_single))


def snapshot(engines: Sequence[Instance], replicas: Sequence[BatchingReplica], now: int) -> dict[int, Counters]:
    """Every instance's counters at ``now``, and every runtime replica's (its busy time credited at batch
    ends; it has no token gaps)."""
    out = {inst.index: counters_at(inst, now) for inst in engines}
    for replica in replicas:
        out[replica.index] = Counters(replica.busy_ended_us(), 0, 0)
    return out


@dataclass
class WindowProbe:
    """Runs the event loop in segments up to the window's edges, snapshotting every instance there, then
    measures the run through the window."""

    window: MeasureWindow
    engines: Sequence[Instance] = ()  # the world's instances and runtime replicas (set once built)
    replicas: Sequence[BatchingReplica] = ()
    edges: list[dict[int, Counters]] = field(default_factory=list)  # at the start, and the end if closed
    masks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the request rows before, in, after it

    def run(self, loop: EventLoop, horizon_us: int | None) -> int:
        """Run ``loop`` to its end (the horizon), pausing at the window's edges; the final time."""
        for edge in (self.window.start_us, self.window.end_us):
            if edge is None:
                break
            loop.horizon_us = edge  # events at the edge run before the pause
            loop.run()
            self.edges.append(snapshot(self.engines, self.replicas, edge))
        loop.horizon_us = horizon_us
        return loop.run()

    def measured(self, table: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks of the request table's rows: arrived before the window, in it, after it."""
        arrival_us = np.rint(table["arrival_ms"] * 1000.0).astype(np.int64)
        before = arrival_us < self.window.start_us
        if self.window.first_request:  # sim.warmup_requests: the first requests by arrival (ids follow arrival)
            before |= table["request_id"] < self.window.first_request
        end = self.window.end_us
        after = arrival_us >= end if end is not None else np.zeros(len(arrival_us), dtype=bool)
        return before, ~before & ~after, after

    def span_us(self, first_arrival_us: int | None, end_us: int) -> tuple[int, int]:
        """The measured span: the window clipped to the run (first arrival to end)."""
        start = max(self.window.start_us, first_arrival_us or 0)
        stop = end_us if self.window.end_us is None else min(self.window.end_us, end_us)
        return start, max(stop, start)

    def summary(self, table: Table, instances: Table, first_arrival_us: int | None, end_us: int, *, seed: int,
                events: int, bill: Callable[[int, int], np.ndarray | None]) -> tuple[dict, int, int]:
        """summary.json over the window (fitness not yet added; ``bill``: each instance's seconds billed
        within a span, or None), and the measured span."""
        self.masks = self.measured(table)
        start_us, stop_us = self.span_us(first_arrival_us, end_us)
        rows = take_rows(table, self.masks[1])
        fleet = self.fleet_table(instances, rows)
        itl_values, itl_weights = self.itl_samples()
        summary = summarize(
            rows, fleet, itl_values, itl_weights, seed=seed, events=events, start_us=start_us, end_us=stop_us,
            billed_s=bill(start_us, stop_us),
        )
        return summary, start_us, stop_us

    def section(self, table: Table, instances: Table, summary: dict, start_us: int, stop_us: int, run_start: int,
                end_us: int) -> dict:
        """summary.json's ``window``, after the whole run's figures are put back (``sim.simulated_s``, the
        CPU tier's counters); adds the ``measured`` column to ``table``."""
        assert self.masks is not None
        before, measured, after = self.masks
        summary["sim"]["simulated_s"] = rnd(max(end_us - run_start, 1) / 1e6, 6)  # the run's own length
        if "cpu_kv" in summary:  # the tier's counters are the whole run's: so is its hit rate
            scheduled = ~np.isnan(table["queue_ms"])
            summary.update(cpu_kv_counts(instances, int(table["input_tokens"][scheduled].sum())))
        section = {
            "start_ms": rnd(self.window.start_us / 1000.0),
            "end_ms": None if self.window.end_us is None else rnd(self.window.end_us / 1000.0),
            "span_s": rnd((stop_us - start_us) / 1e6, 6),  # what the rates divide by (0: the run ended before it)
            "measured": int(measured.sum()),
            "excluded_before": int(before.sum()),
            "excluded_after": int(after.sum()),
        }
        if self.window.first_request:
            section["warmup_requests"] = self.window.first_request
        if len(table) and not measured.any():
            key = "sim.warmup_requests" if self.window.first_request else "sim.warmup_s"
            warn_config(key, "no request arrived in the measurement window: every figure is empty")
        table.add("measured", measured, "bool")
        return section

    def _end_counters(self) -> dict[int, Counters]:
        """The counters at the window's end: its snapshot, or the run's final ones for an open window."""
        if self.window.end_us is not None:
            return self.edges[1]
        out = {inst.index: Counters(inst.stats.busy_us, len(inst.stats.itl_step_durations), len(inst.stats.itl_single))
               for inst in self.engines}
        out.update((r.index, Counters(r.stats.busy_us, 0, 0)) for r in self.replicas)
        return out

    def fleet_table(self, instances: Table, rows: Table) -> Table:
        """instances' columns for the summary, with busy time and too-long refusals inside the window."""
        begin, end = self.edges[0], self._end_counters()
        zero = Counters(0, 0, 0)
        # an instance missing from a snapshot did not exist yet (a scale-up): nothing done by then
        busy_ms = [(end.get(i, zero).busy_us - begin.get(i, zero).busy_us) / 1000.0 for i in instances["instance"].tolist()]
        # a request the instance refused as too long is rejected with that instance set (admission leaves it -1)
        refused = is_status(rows, "rejected") & (rows["instance"] >= 0)
        index = {i: k for k, i in enumerate(instances["instance"].tolist())}
        too_long = np.zeros(len(instances), dtype=np.int64)
        for i in rows["instance"][refused].tolist():
            too_long[index[i]] += 1
        out = Table()
        for name in instances:
            values = {"busy_ms": busy_ms, "too_long": too_long}.get(name, instances[name])
            out.add(name, values, instances.kind(name), instances.categories(name) if instances.kind(name) == "category" else ())
        return out

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The token gaps of the steps ending in the window, tallied as distsim.metrics.tables.itl_samples does."""
        begin, end = self.edges[0], self._end_counters()
        low = self.window.start_us
        high = self.window.end_us if self.window.end_us is not None else np.iinfo(np.int64).max
        zero = Counters(0, 0, 0)
        tally = Tally()
        for inst in self.engines:
            s, b, e = inst.stats, begin.get(inst.index, zero), end.get(inst.index, zero)
            tally.add(np.asarray(s.itl_step_durations[b.steps : e.steps], dtype=np.int64),
                      np.asarray(s.itl_step_weights[b.steps : e.steps], dtype=np.int64))
            if s.itl_run_counts:
                ends = np.frombuffer(s.itl_run_ends, dtype=np.int64)
                inside = (ends > low) & (ends <= high)
                weights = np.repeat(np.asarray(s.itl_run_weights, dtype=np.int64), s.itl_run_counts)
                tally.add(s.itl_run_durations[inside], weights[inside])
            singles = s.itl_single[b.singles : e.singles]
            if singles:
                tally.add(np.asarray(singles, dtype=np.int64), np.ones(len(singles), dtype=np.int64))
        return tally.result()


class WindowFeature(Feature):
    """The measurement window as a run's feature: it runs the loop in segments, makes the summary over the
    window, and writes summary.json's ``window``."""

    name = "window"

    def __init__(self) -> None:
        self.parts: Parts | None = None
        self.probe: WindowProbe | None = None

    def attach(self, parts: Parts) -> None:
        self.parts = parts
        self.probe = WindowProbe(parts.sim.window, parts.world.instances, parts.replicas)

    def run(self, loop: EventLoop) -> int:
        assert self.parts is not None and self.probe is not None
        return self.probe.run(loop, self.parts.sim.horizon_us)

    def summarize(self, m: Measures, bill: Callable[[int, int], np.ndarray | None]) -> dict[str, Any]:
        assert self.probe is not None
        first = m.parts.world.first_arrival_us
        summary, m.start_us, m.stop_us = self.probe.summary(m.table, m.instances, first, m.end_us, seed=m.parts.seed,
                                                            events=m.events, bill=bill)
        return summary

    def report(self, m: Measures) -> dict[str, Any]:
        assert self.probe is not None
        run_start = m.parts.world.first_arrival_us or 0
        return self.probe.section(m.table, m.instances, m.summary, m.start_us, m.stop_us, run_start, m.end_us)


def take_rows(table: Table, mask: np.ndarray) -> Table:
    """The rows of ``table`` where ``mask`` holds, every column with its kind."""
    out = Table()
    for name in table:
        kind = table.kind(name)
        out.add(name, table[name][mask], kind, table.categories(name) if kind == "category" else ())
    return out
