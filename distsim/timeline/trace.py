"""The timeline: a run's schedule as a Chrome trace (timeline.json, with ``sim.timeline=true``).

Why: a schedule is debugged by looking at it. The file is the Chrome trace-event format (a JSON object
with ``traceEvents``), which https://ui.perfetto.dev (Open trace file) and chrome://tracing open. Times
are the simulator's own integer microseconds (``ts``, ``dur``). What it holds:

- **One process per instance** (``pid`` = instance + 1), named by metadata events after its number,
  pool, role and hardware (and cell, DP group). Its thread ``steps`` holds its engine steps as complete
  slices (``X``) named by phase (prefill, decode, mixed), with args ``phase``, ``steps``,
  ``prefill_tokens``, ``decode_tokens``, ``sequences`` (requests in the step) and ``step_us`` (with
  roofline3 also the serving layer's ``padding_us``, ``eager_us``, ``collectives_us``, ``sampler_us``, ``host_us`` per
  step: distsim/instance/latency/serving.py). A
  fast-forwarded run of decode-only steps (``sim.fast_forward``) is **one slice with ``steps`` > 1**
  (``step_us`` its mean step, ``first_step_us`` and ``last_step_us``): the simulator never makes those
  steps one by one, and the slices of an instance sum to its ``busy_ms`` in instances.parquet either way.
- **Requests** as async slices (``b``/``e``, ``id`` the request id) on the process of the instance that
  served them (under P/D the decode instance, requests.parquet's ``instance``), from arrival to their last
  token (an unfinished one: to the end of the run), with nested phases ``queue`` (to the first step that
  schedules it), ``prefill`` (to its first token; under P/D to the hand-off), ``kv_transfer`` (P/D: the
  hand-off to the first token, waiting for the decode instance's blocks included) and ``decode`` (to the
  last token); a non-LLM request has ``batch`` instead of prefill and decode. Times are requests.parquet's
  (first tokens and completions as the client sees them). A request that never ran (rejected, dropped)
  is an async instant (``n``) at its arrival, on the ``cluster`` process when no instance took it.
- **Flows** (``bind_id`` with ``flow_out`` / ``flow_in``, the trace format's flow binding) between
  zero-length marker slices on the instances' thread ``transfers``: one per KV transfer (P/D), from the
  prefill instance when the KV leaves to the decode instance when it lands (args: bytes, transfer_us);
  one per hedge copy, from the instance of the request's first copy to the copy's, at the hedge (written
  by hedging's feature as the copy is sent: distsim.hedging.feature).
- **Cells**: the front router's picks and spill-overs as instant events (``i``) on the ``cluster`` process
  (written by the cells' feature as the front acts: distsim.cells.feature).
- **Batching-runtime replicas**: one process each, their batches as slices, one thread per concurrency
  slot in use.

The window (``sim.timeline_start_s``, ``sim.timeline_end_s``: distsim.metrics.settings) keeps what
overlaps ``[start, end)``: slices and requests that cross an edge are kept whole, instants and flows by
their start. Steps outside it are never stored, so a long run with a short window costs little memory.

The timeline listens (distsim.instance.observed, the cluster's ``listeners``) and reads; a feature writes
its own records into it where it acts (``flow``, ``instant``); it never changes the simulation (tests/test_timeline.py: identical outputs with and without).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.cluster.cluster import ClusterListener
from distsim.errors import warn_config
from distsim.metrics.settings import TimelineWindow
from distsim.request import Request

if TYPE_CHECKING:
    import pandas as pd

    from distsim.feature import Parts
    from distsim.instance.instance import Instance
    from distsim.instance.plan import StepPlan
    from distsim.metrics.columns import Table
    from distsim.protocols import BatchingReplica

STEPS_TID = 1  # an instance's steps
SERVING_ARGS = ("padding_us", "eager_us", "collectives_us", "sampler_us", "host_us")
MARKS_TID = 2  # an instance's flow markers (KV transfers, hedges)
FAST_FORWARD_NOTE = "a fast-forwarded run of decode steps is one slice; args.steps counts its steps"


class Timeline(ClusterListener):
    """Collects the schedule while the run goes on, and makes the trace at its end (:meth:`trace`)."""

    def __init__(self, window: TimelineWindow):
        self.start_us = window.start_us
        self.stop_us = window.end_us if window.end_us is not None else np.iinfo(np.int64).max
        # instance -> (begin, end, steps, decoders, prefill tokens, prefill requests, first step, last step)
        self.steps: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        self.handoffs: dict[int, int] = {}  # P/D: request (or copy) id -> when its prompt was computed
        self.transfers: list[tuple[int, int, int, int, int, float]] = []  # (id, prefill, decode, start, us, bytes)
        # what the features write where they act (distsim.hedging.feature's copies, distsim.cells.feature's
        # picks): by feature, in the order the features attached; a flow's two markers, or an instant
        self.records: dict[str, list[tuple[dict, ...]]] = {}
        self.cluster_threads: dict[int, str] = {}  # the cluster process's threads the features' instants use

    def attach(self, parts: Parts) -> None:
        """Listen to the world of ``parts`` (a cluster or a fleet of cells, built with ObservedInstance engines)."""
        world = parts.world
        for inst in world.instances:
            inst.step_listeners.append(self.step)
        for cluster in parts.clusters:
            cluster.listeners.append(self)

    def _overlaps(self, begin: int, end: int) -> bool:
        return end > self.start_us and begin < self.stop_us

    def _inside(self, t: int) -> bool:
        return self.start_us <= t < self.stop_us

    # ------------------------------------------------------------------ listening
    def step(self, inst: Instance, plan: StepPlan, now: int) -> None:
        """A step, or a fast-forwarded run of ``plan.steps`` decode steps, ends at ``now``."""
        begin = plan.begin_us
        if not self._overlaps(begin, now):
            return
        k = plan.steps
        ends = plan.ends_us
        if ends is None:
            chunks = plan.chunks
            row = (begin, now, 1, plan.decoders, sum(n for _, n in chunks), len(chunks), 0, 0)
        else:
            first = ends[0] - begin
            row = (begin, now, k, plan.decoders, 0, 0, first, ends[k - 1] - ends[k - 2] if k > 1 else first)
        self.steps[inst.index].append(row)

    def handed_off(self, req: Request, now: int) -> None:
        self.handoffs[req.request_id] = now

    def kv_transfer(self, req: Request, start_us: int, duration_us: int, nbytes: float) -> None:
        self.transfers.append((req.request_id, req.prefill_instance, req.instance, start_us, duration_us, nbytes))

    # ------------------------------------------------------------------ what the features write
    def inside(self, t: int) -> bool:
        """Whether an instant at ``t`` is kept (the window keeps instants and flows by their start)."""
        return self._inside(t)

    def flow(self, owner: str, cat: str, label: str, src: int, dst: int, t_out: int, t_in: int, args_out: dict,
             args_in: dict) -> None:
        """``owner``'s flow from instance ``src`` at ``t_out`` to instance ``dst`` at ``t_in``: two markers on
        the instances' ``transfers`` threads (their binding numbered when the trace is made)."""
        self.records.setdefault(owner, []).append(_markers(cat, label, src, dst, t_out, t_in, args_out, args_in))

    def instant(self, owner: str, name: str, cat: str, ts: int, tid: int, thread: str, args: dict) -> None:
        """``owner``'s instant event on the cluster process's thread ``tid`` (named ``thread``)."""
        self.cluster_threads[tid] = thread
        event = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": -1, "tid": tid, "args": args}
        self.records.setdefault(owner, []).append((event,))

    # ------------------------------------------------------------------ the trace
    def trace(self, parts: Parts, requests: Table | pd.DataFrame, end_us: int, seed: int) -> dict[str, Any]:
        """The Chrome trace of the run: ``parts`` its world as run, ``requests`` its request table (a column
        Table or a DataFrame, requests.parquet's columns), ``end_us`` the end of the run. A window that starts at
        or after the end warns (without sim.horizon_s the end is known only now; with it, it is an error
        before the run, distsim.metrics.settings.timeline_window): the run is valid, its timeline empty."""
        if self.start_us >= end_us:
            warn_config(
                "sim.timeline_start_s",
                f"is {self.start_us / 1e6:g} s, at or after the end of the run ({end_us / 1e6:g} s): timeline.json is empty",
            )
        out = _Events()
        world = parts.world
        runtimes = parts.replicas
        cluster_pid = 1 + len(world.instances) + len(runtimes)
        self._instances(out, parts)
        for replica in runtimes:
            self._runtime(out, replica, end_us)
        self._requests(out, parts, requests, end_us, cluster_pid)
        self._flows(out)
        for records in self.records.values():
            for record in records:
                if len(record) == 2:
                    out.bind(record)
                else:
                    out.add({**record[0], "pid": cluster_pid})
        if cluster_pid in out.used():
            name = "front and cells" if _cells(parts) is not None else "cluster"
            out.process(cluster_pid, name, self.cluster_threads)
        return {
            "displayTimeUnit": "ms",
            "otherData": {
                "generator": "distsim",
                "seed": seed,
                "clock": "simulated microseconds",
                "window_us": [self.start_us, None if self.stop_us == np.iinfo(np.int64).max else self.stop_us],
                "end_us": end_us,
                "fast_forward": FAST_FORWARD_NOTE,
            },
            "traceEvents": out.events(),
        }

    def _instances(self, out: _Events, parts: Parts) -> None:
        world = parts.world
        cell_of = {}
        for c, cluster in enumerate(_cells(parts) or ()):
            cell_of.update((inst.index, c) for inst in cluster.instances)
        for inst, pool in zip(world.instances, world.pool_of):
            pid = inst.index + 1
            extra = f", cell {cell_of[inst.index]}" if inst.index in cell_of else ""
            if pool.data_parallel_size > 1:
                extra += f", DP group {inst.dp_group}"
            out.process(pid, f"instance {inst.index} ({inst.pool}, {inst.role}, {inst.hardware}{extra})",
                        {STEPS_TID: "steps", MARKS_TID: "transfers"}, always=STEPS_TID)
            terms = getattr(inst.latency, "step_terms", None)  # the serving layer's (roofline3)
            for begin, end, k, b, pf, seqs, first, last in self.steps.get(inst.index, ()):
                phase = ("mixed" if b else "prefill") if pf else "decode"
                args = {"phase": phase, "steps": k, "prefill_tokens": pf, "decode_tokens": b * k,
                        "sequences": b + seqs, "step_us": end - begin if k == 1 else round((end - begin) / k, 1)}
                if k > 1:
                    args["first_step_us"], args["last_step_us"] = first, last
                if terms is not None:  # per step: CUDA-graph padding, eager gaps, collectives, sampling, exposed host
                    args.update(zip(SERVING_ARGS, (round(v, 1) for v in terms(pf + b, b + seqs))))
                out.add({"name": phase, "cat": "step", "ph": "X", "ts": begin, "dur": end - begin, "pid": pid,
                         "tid": STEPS_TID, "args": args})

    def _runtime(self, out: _Events, replica: BatchingReplica, end_us: int) -> None:
        """A batching-runtime replica: its batches that ended by the end of the run, a thread per slot."""
        pid = replica.index + 1
        lanes: list[int] = []  # each slot's last batch end
        for batch in replica.batches:
            if batch.end_us > end_us:
                continue
            lane = next((i for i, free_at in enumerate(lanes) if free_at <= batch.start_us), len(lanes))
            if lane == len(lanes):
                lanes.append(0)
            lanes[lane] = batch.end_us
            if not self._overlaps(batch.start_us, batch.end_us):
                continue
            out.add({"name": "batch", "cat": "batch", "ph": "X", "ts": batch.start_us, "dur": batch.end_us - batch.start_us,
                     "pid": pid, "tid": STEPS_TID + lane, "args": {"items": batch.items, "requests": len(batch.requests),
                                                                    "size": batch.size, "full": batch.full}})
        threads = {STEPS_TID + i: f"slot {i}" for i in range(max(len(lanes), 1))}
        out.process(pid, f"runtime replica {replica.index} ({replica.pool.name}, serves {replica.serves}, "
                         f"{replica.pool.hardware.name})", threads, always=STEPS_TID)

    def _requests(
        self, out: _Events, parts: Parts, requests: Table | pd.DataFrame, end_us: int, cluster_pid: int
    ) -> None:
        cols = _RequestColumns(requests)
        winner = _hedge_winners(parts)
        kv = {t[0]: t for t in self.transfers}
        for row in range(len(cols)):
            rid, arrival, status = cols.ids[row], cols.arrival[row], cols.status[row]
            end = cols.completion[row] if cols.completion[row] >= 0 else end_us
            instance = cols.instance[row]
            pid = instance + 1 if instance >= 0 else cluster_pid
            args = {"status": status, "input_tokens": cols.input[row], "output_tokens": cols.output[row],
                    "cached_tokens": cols.cached[row], "preemptions": cols.preemptions[row]}
            if cols.prefill[row] >= 0 and cols.prefill[row] != instance:
                args["prefill_instance"] = cols.prefill[row]
            if cols.types is not None and cols.types[row] != "llm":
                args["type"] = cols.types[row]
            name = f"request {rid}"
            if status in ("rejected", "dropped") or end <= arrival:
                if self._inside(arrival):
                    out.add({"name": name, "cat": "request", "ph": "n", "id": rid, "ts": arrival, "pid": pid, "tid": 0,
                             "args": args})
                continue
            if not self._overlaps(arrival, end):
                continue
            key = winner.get(rid, rid)
            phases = self._phases(cols, row, end, self.handoffs.get(key), kv.get(key))
            out.request(name, rid, pid, arrival, end, args, phases)

    @staticmethod
    def _phases(cols: _RequestColumns, row: int, end: int, handoff: int | None, kv: tuple | None) -> list[tuple]:
        """(name, begin, end, args) of the request's phases, contiguous from arrival to ``end``."""
        arrival, scheduled, first = cols.arrival[row], cols.scheduled[row], cols.first_token[row]
        phases: list[tuple] = [("queue", arrival, scheduled if scheduled >= 0 else end, None)]
        if scheduled < 0:
            return phases
        if cols.types is not None and cols.types[row] != "llm":
            return [*phases, ("batch", scheduled, end, None)]
        prefill_end = first if first >= 0 else end
        if handoff is not None and scheduled <= handoff <= prefill_end:
            phases.append(("prefill", scheduled, handoff, None))
            kv_args = None if kv is None else {"wait_us": kv[3] - handoff, "transfer_us": kv[4], "bytes": int(kv[5])}
            phases.append(("kv_transfer", handoff, prefill_end, kv_args))
        else:
            phases.append(("prefill", scheduled, prefill_end, None))
        if first >= 0:
            phases.append(("decode", first, end, None))
        return phases

    def _flows(self, out: _Events) -> None:
        for rid, src, dst, start, dur, nbytes in self.transfers:
            if self._inside(start):
                out.bind(_markers("kv_transfer", "KV", src, dst, start, start + dur,
                                  {"request": rid, "to_instance": dst, "bytes": int(nbytes), "transfer_us": dur},
                                  {"request": rid, "from_instance": src, "bytes": int(nbytes), "transfer_us": dur}))


def _markers(cat: str, label: str, src: int, dst: int, t_out: int, t_in: int, args_out: dict, args_in: dict
             ) -> tuple[dict, dict]:
    """A flow's two zero-length markers, from instance ``src`` at ``t_out`` to instance ``dst`` at ``t_in``
    (``bind_id`` set by _Events.bind)."""
    return tuple(  # type: ignore[return-value]
        {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": 0, "pid": pid, "tid": MARKS_TID, "bind_id": 0, key: True,
         "args": args}
        for pid, ts, name, args, key in ((src + 1, t_out, f"{label} out", args_out, "flow_out"),
                                         (dst + 1, t_in, f"{label} in", args_in, "flow_in"))
    )


class _Events:
    """The trace's events: metadata first, then the rest by time, ends before begins at equal times (so a
    phase closes before the next opens) and otherwise in the order added."""

    def __init__(self) -> None:
        self._processes: list[tuple[int, str, dict[int, str], int | None]] = []
        self._timed: list[tuple[int, int, dict]] = []
        self._flows = 0

    def add(self, event: dict) -> None:
        self._timed.append((event["ts"], 0 if event["ph"] == "e" else 1, event))

    def used(self) -> dict[int, set[int]]:
        """pid -> the tids with events."""
        out: dict[int, set[int]] = defaultdict(set)
        for pid, tid in {(e["pid"], e["tid"]) for _, _, e in self._timed}:
            out[pid].add(tid)
        return out

    def process(self, pid: int, name: str, threads: dict[int, str], always: int | None = None) -> None:
        """Process ``pid`` is named ``name``; its threads ``threads`` are named where they have events (and
        ``always``)."""
        self._processes.append((pid, name, threads, always))

    def _meta(self) -> list[dict]:
        out = []
        used_by = self.used()
        for pid, name, threads, always in sorted(self._processes, key=lambda p: p[0]):
            out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
            out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
            used = used_by.get(pid, set()) | ({always} if always is not None else set())
            for tid in sorted(used & threads.keys()):
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": threads[tid]}})
        return out

    def request(self, name: str, rid: int, pid: int, begin: int, end: int, args: dict, phases: list[tuple]) -> None:
        """An async slice with its nested phases (a phase of no length is left out)."""
        timed = self._timed
        timed.append((begin, 1, {"name": name, "ph": "b", "ts": begin, "cat": "request", "id": rid, "pid": pid, "tid": 0,
                                 "args": args}))
        for phase, t0, t1, phase_args in phases:
            t1 = min(t1, end)
            if t1 > t0:
                event = {"name": phase, "ph": "b", "ts": t0, "cat": "request", "id": rid, "pid": pid, "tid": 0}
                if phase_args:
                    event["args"] = phase_args
                timed.append((t0, 1, event))
                timed.append((t1, 0, {"name": phase, "ph": "e", "ts": t1, "cat": "request", "id": rid, "pid": pid, "tid": 0}))
        timed.append((end, 0, {"name": name, "ph": "e", "ts": end, "cat": "request", "id": rid, "pid": pid, "tid": 0}))

    def bind(self, markers: tuple[dict, ...]) -> None:
        """A flow's markers, bound by the next flow number."""
        self._flows += 1
        for marker in markers:
            marker["bind_id"] = self._flows
            self.add(marker)

    def events(self) -> list[dict]:
        timed = sorted(self._timed, key=lambda e: (e[0], e[1]))  # stable: the order added within a time
        return self._meta() + [e for _, _, e in timed]


class _RequestColumns:
    """requests.parquet's columns as Python lists, times back in integer microseconds (-1: never)."""

    def __init__(self, table: Table | pd.DataFrame):
        def us(name: str) -> list[int]:
            ms = np.asarray(table[name], dtype=np.float64)
            return np.where(np.isnan(ms), -1, np.rint(ms * 1000.0)).astype(np.int64).tolist()

        def ints(name: str) -> list[int]:
            return np.asarray(table[name], dtype=np.int64).tolist()

        self.ids = ints("request_id")
        self.arrival = us("arrival_ms")
        queue = us("queue_ms")
        self.scheduled = [a + q if q >= 0 else -1 for a, q in zip(self.arrival, queue)]
        self.first_token, self.completion = us("first_token_ms"), us("completion_ms")
        self.instance, self.prefill = ints("instance"), ints("prefill_instance")
        self.input, self.output, self.cached = ints("input_tokens"), ints("output_tokens"), ints("cached_tokens")
        self.preemptions = ints("preemptions")
        status = table["status"]
        if hasattr(table, "categories"):  # a column Table: category codes
            names = table.categories("status")
            self.status = [names[c] for c in np.asarray(status).tolist()]
        else:
            self.status = [str(s) for s in status]
        self.types = [str(t) for t in table["type"]] if "type" in table else None

    def __len__(self) -> int:
        return len(self.ids)


def _cells(parts: Parts) -> list | None:
    """The cells' clusters, None without a cell layer."""
    return parts.clusters if "cells" in parts.features else None


def _hedge_winners(parts: Parts) -> dict[int, int]:
    """Hedged requests: the id of the copy whose times the request carries (its own, or a copy's)."""
    out = {}
    for hedger in (cluster.hedger for cluster in parts.clusters if cluster.hedger is not None):
        for rid, group in hedger.groups.items():
            if group.winner >= 0:
                out[rid] = group.copies[group.winner].request_id
    return out


def trace_json(trace: dict[str, Any]) -> str:
    """timeline.json's text: compact, one event a line (diffable and streamable), byte-identical for the
    same run."""
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, separators=(",", ":"))
    events = ",\n".join(json.dumps(e, separators=(",", ":")) for e in trace["traceEvents"])
    return head[:-1] + ',"traceEvents":[\n' + events + "\n]}\n"
