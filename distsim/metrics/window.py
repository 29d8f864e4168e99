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
  counts the measured requests (distsim.metrics.hedging reads the column). With autoscaling, cost and
  GPU-hours follow the replicas billed within the span and ``autoscale``'s scale counts and peak are the
  run's (tests/test_windows.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from distsim.errors import warn_config
from distsim.events.loop import EventLoop
from distsim.metrics.columns import Table
from distsim.metrics.settings import MeasureWindow
from distsim.metrics.summary import cpu_kv_counts, is_status, rnd, summarize
from distsim.metrics.tables import Tally

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.metrics.tables import RunWorld
    from distsim.runtime.replica import RuntimeReplica


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


def snapshot(cluster: RunWorld, now: int) -> dict[int, Counters]:
    """Every instance's counters at ``now``, and every runtime replica's (its busy time credited at batch
    ends; it has no token gaps)."""
    out = {inst.index: counters_at(inst, now) for inst in cluster.instances}
    for replica in cluster.runtimes:
        out[replica.index] = Counters(replica.busy_ended_us(), 0, 0)
    return out


@dataclass
class WindowProbe:
    """Runs the event loop in segments up to the window's edges, snapshotting every instance there, then
    measures the run through the window."""

    window: MeasureWindow
    edges: list[dict[int, Counters]] = field(default_factory=list)  # at the start, and the end if closed
    stop_us: int = 0  # the measured span's end (set by ``summary``)

    def run(self, loop: EventLoop, cluster: RunWorld, horizon_us: int | None) -> int:
        """Run ``loop`` to its end (the horizon), pausing at the window's edges; the final time."""
        for edge in (self.window.start_us, self.window.end_us):
            if edge is None:
                break
            loop.horizon_us = edge  # events at the edge run before the pause
            loop.run()
            self.edges.append(snapshot(cluster, edge))
        loop.horizon_us = horizon_us
        return loop.run()

    def measured(self, table: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks of the request table's rows: arrived before the window, in it, after it."""
        arrival_us = np.rint(table["arrival_ms"] * 1000.0).astype(np.int64)
        before = arrival_us < self.window.start_us
        end = self.window.end_us
        after = arrival_us >= end if end is not None else np.zeros(len(arrival_us), dtype=bool)
        return before, ~before & ~after, after

    def span_us(self, first_arrival_us: int | None, end_us: int) -> tuple[int, int]:
        """The measured span: the window clipped to the run (first arrival to end)."""
        start = max(self.window.start_us, first_arrival_us or 0)
        stop = end_us if self.window.end_us is None else min(self.window.end_us, end_us)
        return start, max(stop, start)

    def summary(
        self, table: Table, instances: Table, cluster: RunWorld, *, seed: int, events: int, end_us: int
    ) -> dict:
        """summary.json over the window (fitness not yet added); adds the ``measured`` column to ``table``."""
        before, measured, after = self.measured(table)
        start_us, stop_us = self.span_us(cluster.first_arrival_us, end_us)
        self.stop_us = stop_us
        rows = take_rows(table, measured)
        fleet = self.fleet_table(instances, cluster, rows)
        itl_values, itl_weights = self.itl_samples(cluster)
        autoscaler = cluster.autoscaler  # cost follows the replicas billed within the span
        billed_s = autoscaler.billed_s(start_us, stop_us) if autoscaler is not None else None
        summary = summarize(
            rows, fleet, itl_values, itl_weights, seed=seed, events=events, start_us=start_us, end_us=stop_us, billed_s=billed_s
        )
        if autoscaler is not None:  # its GPU-hours, cost and mean replicas over the span too
            from distsim.metrics.autoscale import autoscale_summary

            summary["autoscale"] = autoscale_summary(autoscaler, instances, start_us, stop_us)
        run_start = cluster.first_arrival_us or 0
        summary["sim"]["simulated_s"] = rnd(max(end_us - run_start, 1) / 1e6, 6)  # the run's own length
        if "cpu_kv" in summary:  # the tier's counters are the whole run's: so is its hit rate
            scheduled = ~np.isnan(table["queue_ms"])
            summary.update(cpu_kv_counts(instances, int(table["input_tokens"][scheduled].sum())))
        summary["window"] = {
            "start_ms": rnd(self.window.start_us / 1000.0),
            "end_ms": None if self.window.end_us is None else rnd(self.window.end_us / 1000.0),
            "span_s": rnd((stop_us - start_us) / 1e6, 6),  # what the rates divide by (0: the run ended before it)
            "measured": int(measured.sum()),
            "excluded_before": int(before.sum()),
            "excluded_after": int(after.sum()),
        }
        if len(table) and not measured.any():
            warn_config("sim.warmup_s", "no request arrived in the measurement window: every figure is empty")
        table.add("measured", measured, "bool")
        return summary

    def _end_counters(self, cluster: RunWorld) -> dict[int, Counters]:
        """The counters at the window's end: its snapshot, or the run's final ones for an open window."""
        if self.window.end_us is not None:
            return self.edges[1]
        out = {inst.index: Counters(inst.stats.busy_us, len(inst.stats.itl_step_durations), len(inst.stats.itl_single))
               for inst in cluster.instances}
        out.update((r.index, Counters(r.stats.busy_us, 0, 0)) for r in cluster.runtimes)
        return out

    def types(self, table: Table, runtimes: Sequence[RuntimeReplica], span_s: float) -> dict:
        """summary.json's ``types`` over the window: the measured rows (``summary`` added the column), and
        the runtimes' batches that ended inside the span (as the fleet figures count steps)."""
        from distsim.metrics.types import types_summary

        rows = take_rows(table, table["measured"])
        return types_summary(rows, runtimes, span_s, ended_in=(self.window.start_us, self.stop_us))

    def fleet_table(self, instances: Table, cluster: RunWorld, rows: Table) -> Table:
        """instances' columns for the summary, with busy time and too-long refusals inside the window."""
        begin, end = self.edges[0], self._end_counters(cluster)
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

    def itl_samples(self, cluster: RunWorld) -> tuple[np.ndarray, np.ndarray]:
        """The token gaps of the steps ending in the window, tallied as distsim.metrics.tables.itl_samples does."""
        begin, end = self.edges[0], self._end_counters(cluster)
        low = self.window.start_us
        high = self.window.end_us if self.window.end_us is not None else np.iinfo(np.int64).max
        zero = Counters(0, 0, 0)
        tally = Tally()
        for inst in cluster.instances:
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


def take_rows(table: Table, mask: np.ndarray) -> Table:
    """The rows of ``table`` where ``mask`` holds, every column with its kind."""
    out = Table()
    for name in table:
        kind = table.kind(name)
        out.add(name, table[name][mask], kind, table.categories(name) if kind == "category" else ())
    return out
