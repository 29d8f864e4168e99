"""Trace replay (``workload.kind=trace``): a reader's rows turned into requests, streaming.

Building the source reads the selected rows through once: that validates every line before anything
is simulated and measures the span, row count and token totals (``describe()``), which rate
rescaling needs. Iterating reads the file again. Neither pass keeps rows, so memory does not grow with
the trace (except one entry per session for traces with a ``session`` column).

Arrival times count from the first selected row, in integer nanoseconds until the single rounding to
microseconds, scaled by ``time_scale`` or by the factor that makes the mean rate ``target_rate_rps``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import islice

import numpy as np

from distsim.errors import ConfigError, InputFileError
from distsim.events.rng import stream
from distsim.request import Request, new_request, new_typed_request
from distsim.workload import checks
from distsim.workload.base import WorkloadSource
from distsim.workload.keys import UniqueKeys, trace_block_keys
from distsim.workload.kinds import KINDS
from distsim.workload.mix import type_slos
from distsim.workload.paths import resolve_path
from distsim.workload.prefixes import PrefixGroups
from distsim.workload.source import limits, warn_other_kinds_keys
from distsim.workload.tenants import Tagger
from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceRow

CHUNK = 4096
_S = 1_000_000_000  # ns per second


class TraceSource(WorkloadSource):
    def __init__(self, cfg, seed: int, block_size: int):
        self.seed = seed
        self.block_size = block_size
        checks.required(
            "workload.format", cfg.format, "for kind=trace (one of: " + ", ".join(READERS.names()) + ")"
        )
        READERS.get(cfg.format)  # an unknown format lists the known ones
        self.format = cfg.format
        self.path = resolve_path("workload.path", cfg.path)
        self.limit, self.duration_us = limits(cfg, need_one=False)
        if self.limit == 0:
            raise ConfigError("workload.num_requests", "must be >= 1 for a trace (null: the whole file)")
        self.time_scale = checks.positive("workload.time_scale", cfg.time_scale)
        self.target_rate = (
            None
            if cfg.target_rate_rps is None
            else checks.positive("workload.target_rate_rps", cfg.target_rate_rps)
        )
        if self.target_rate is not None and self.time_scale != 1.0:
            raise ConfigError(
                "workload.target_rate_rps", "set either time_scale or target_rate_rps, not both"
            )
        self.start_ns = (
            None if cfg.start_s is None else round(checks.non_negative("workload.start_s", cfg.start_s) * _S)
        )
        self.end_ns = (
            None if cfg.end_s is None else round(checks.non_negative("workload.end_s", cfg.end_s) * _S)
        )
        if self.end_ns is not None and self.end_ns <= (self.start_ns or 0):
            raise ConfigError("workload.end_s", f"must be > start_s (got {cfg.end_s!r})")
        self.max_rows = (
            None if cfg.max_rows is None else checks.integer("workload.max_rows", cfg.max_rows, low=1)
        )
        self.jitter_us = (
            None if cfg.jitter_s is None else checks.non_negative("workload.jitter_s", cfg.jitter_s) * 1e6
        )
        warn_other_kinds_keys(cfg)
        self.tagger = Tagger(cfg, lengths=False)
        self.prefixes = PrefixGroups(cfg.prefix, "workload.prefix", block_size)
        self.types_seen: set[str] = set()  # non-LLM types named by the trace's optional type column
        self.type_slo_ms = type_slos(cfg)
        self.adapters = cfg.lora.adapters  # the LoRA catalog's size: a row's adapter must be in it
        self._prepass()

    # -- reading -------------------------------------------------------------------------------

    def _checked(self, rows: Iterator[TraceRow]) -> Iterator[TraceRow]:
        """Rows with the checks every format shares: lengths, time order, prefix groups."""
        path, prev, first = self.path, None, None
        groups = self.prefixes.groups
        for row in rows:
            for name, v in () if row.rtype is not None else (("input", row.input_tokens), ("output", row.output_tokens)):
                if v < 0:
                    raise InputFileError(path, f"negative {name} length: {v}", row.line)
                if v == 0:
                    raise InputFileError(path, f"{name} length is 0 (must be >= 1)", row.line)
            if prev is not None and row.time_ns < prev:
                raise InputFileError(
                    path,
                    f"time goes backwards: {(row.time_ns - first) / _S:.6f} s after the first row, "
                    f"but the row before was at {(prev - first) / _S:.6f} s",
                    row.line,
                )
            if first is None:
                first = row.time_ns
            prev = row.time_ns
            if row.adapter is not None and row.adapter >= self.adapters:
                raise InputFileError(
                    path, f"adapter {row.adapter} is not in the catalog (workload.lora.adapters={self.adapters})", row.line
                )
            g = row.prefix_group
            if g is not None and not 0 <= g < groups:
                raise InputFileError(
                    path,
                    f"prefix_group {g} is not in 0..{groups - 1} (workload.prefix.groups={groups})",
                    row.line,
                )
            yield row

    def _selected(self, reader) -> Iterator[TraceRow]:
        """The rows inside the window, at most ``max_rows`` and ``num_requests`` of them."""
        cap = min((c for c in (self.max_rows, self.limit) if c is not None), default=None)
        t_file0 = None
        kept = 0
        for row in self._checked(reader.rows()):
            if t_file0 is None:
                t_file0 = row.time_ns
            rel = row.time_ns - t_file0
            if self.start_ns is not None and rel < self.start_ns:
                continue
            if self.end_ns is not None and rel >= self.end_ns:
                return
            if cap is not None and kept >= cap:
                return
            kept += 1
            yield row

    def _reader(self):
        reader = READERS[self.format](self.path)
        reader.seed = self.seed  # a reader that draws its rows (servegen) draws them from the run's seed
        return reader

    def _prepass(self) -> None:
        reader = self._reader()
        n = inp = out = 0
        first = last = None
        has_tenant = False
        for row in self._selected(reader):
            if first is None:
                first = row.time_ns
            last = row.time_ns
            n += 1
            inp += row.input_tokens
            out += row.output_tokens
            has_tenant = has_tenant or row.tenant is not None
            if row.rtype is not None:
                self.types_seen.add(row.rtype)
        if n == 0:
            window = " inside the window (workload.start_s/end_s)" if self.start_ns or self.end_ns else ""
            raise InputFileError(self.path, f"the trace has no requests{window}")
        span = last - first
        if self.target_rate is not None:
            if n < 2 or span == 0:
                raise ConfigError(
                    "workload.target_rate_rps", "needs at least two selected rows at different times"
                )
            self.factor = (n - 1) * _S / (span * self.target_rate)
        else:
            self.factor = self.time_scale
        self.first_ns = first
        self.has_tenant = has_tenant
        self.info = {
            "kind": "trace",
            "format": self.format,
            "path": str(self.path),
            "rows": n,
            "span_s": span / _S,
            "input_tokens": inp,
            "output_tokens": out,
            "skipped": dict(reader.skipped),
            "time_factor": self.factor,
        }

    def describe(self) -> dict:
        return dict(self.info)

    def summary(self) -> dict:
        """Rows replayed and rows the reader skipped (e.g. BurstGPT's failed requests), by reason."""
        skipped = dict(sorted(self.info["skipped"].items()))
        return {
            "format": self.format,
            "rows": self.info["rows"],
            "skipped_rows": sum(skipped.values()),
            "skipped": skipped,
        }

    # -- requests ------------------------------------------------------------------------------

    def _arrival_us(self, time_ns: int) -> int:
        d = time_ns - self.first_ns
        if self.factor == 1.0:
            return (d + 500) // 1000
        return round(d * self.factor / 1000.0)

    def _drafts(self) -> Iterator[Request]:
        """Requests in file order, with arrival times but request ids not yet final."""
        return (req for req, _ in self._drafted())

    def session_turns(self) -> Iterator[tuple[Request, int, int]]:
        """Closed-loop session replay: each row's request in file order, with its wait after the previous
        turn's reply in microseconds (scaled as the arrival times are) and the tool calls in that wait."""
        for req, row in self._drafted():
            wait_ns = row.wait_ns or 0
            wait_us = (wait_ns + 500) // 1000 if self.factor == 1.0 else round(wait_ns * self.factor / 1000.0)
            yield req, wait_us, row.tool_calls or 0

    def _drafted(self) -> Iterator[tuple[Request, TraceRow]]:
        """``_drafts``' requests, each with its row."""
        reader = self._reader()
        rows = self._selected(reader)
        rng = stream(self.seed, "workload/tenants")
        bs = self.block_size
        unique = UniqueKeys()
        sessions: dict[int, tuple[int, tuple]] = {}
        prefixes = self.prefixes
        trace_block = READERS[self.format].block_tokens
        while True:
            chunk = list(islice(rows, CHUNK))
            if not chunk:
                return
            tenant = np.asarray([r.tenant or 0 for r in chunk], dtype=np.int64) if self.has_tenant else None
            tags = self.tagger.tag(rng, len(chunk), tenant)
            tenants = tags.tenant.tolist()
            for i, row in enumerate(chunk):
                p = row.input_tokens
                if row.hash_ids is not None:
                    bh = trace_block_keys(row.hash_ids, p, bs, trace_block)
                elif row.session is not None or row.prefix_group is not None:
                    bh = None
                    if row.session is not None and row.session in sessions:
                        prev_p, prev_keys = sessions[row.session]
                        if p >= prev_p:  # the previous prompt is a prefix of this one
                            bh = prev_keys + unique.take(p // bs - len(prev_keys))
                    if bh is None:
                        g = row.prefix_group
                        bh = prefixes.block_keys(g, p, unique) if g is not None else unique.take(p // bs)
                    if row.session is not None:
                        sessions[row.session] = (p, bh)
                else:
                    bh = None
                if row.rtype is not None:  # a non-LLM row (an optional type column): its type's SLO
                    yield new_typed_request(-1, self._arrival_us(row.time_ns), row.rtype, row.items, row.size,
                                            self.type_slo_ms.get(row.rtype), tenants[i]), row
                    continue
                session = -1 if row.session is None else row.session
                req = new_request(
                    -1, self._arrival_us(row.time_ns), p, row.output_tokens, tenants[i], tags.slo_class[i], session, bh,
                    tags.ttft_ms[i], tags.tpot_ms[i], tags.priority[i],
                )
                if row.adapter is not None:
                    req.adapter = row.adapter
                yield req, row

    def _jittered(self, drafts: Iterator[Request]) -> Iterator[Request]:
        """Drafts moved later by uniform [0, jitter) and put back in time order (a small heap)."""
        rng = stream(self.seed, "workload/jitter")
        buf: list[float] = []
        heap: list = []
        seq = 0
        for req in drafts:
            base = req.arrival_us
            while heap and heap[0][0] <= base:  # later drafts arrive at >= base: these are final
                yield heapq.heappop(heap)[2]
            if not buf:
                buf = rng.random(CHUNK).tolist()[::-1]
            req.arrival_us = round(base + buf.pop() * self.jitter_us)
            heapq.heappush(heap, (req.arrival_us, seq, req))
            seq += 1
        while heap:
            yield heapq.heappop(heap)[2]

    def __iter__(self) -> Iterator[Request]:
        reqs = self._drafts()
        if self.jitter_us:
            reqs = self._jittered(reqs)
        rid = 0
        for req in reqs:
            if self.duration_us is not None and req.arrival_us > self.duration_us:
                return
            req.request_id = rid
            rid += 1
            yield req


@KINDS.register("trace")
def _build(cfg, seed: int, block_size: int) -> WorkloadSource:
    return TraceSource(cfg, seed, block_size)
