"""distsim's own trace tables, as CSV or Parquet.

Columns ``arrival_s`` (seconds), ``input_tokens``, ``output_tokens``, and optionally ``tenant``,
``session`` (rows of one session: each turn's prompt holds the previous turn's prompt and answer) and
``prefix_group`` (the row's prompt starts with that group's system prompt, see ``workload.prefix``), and
for request types (distsim.workload.mix) ``type`` (llm, vision, asr or any named type), ``items`` (batch
items: images, audio windows; default 1) and ``size`` (per item, in the type's unit: image side in pixels,
audio seconds); a non-LLM row's token columns are ignored; for closed-loop session replay
(``workload.sessions.closed_loop``) ``wait_s``, the seconds between the previous turn's reply and this turn
(a think or tool time; ``python -m distsim.workload.traces.otel`` writes it from OpenTelemetry spans) and
``tool_calls`` (the tool calls in that gap); for LoRA (distsim.workload.adapters) ``adapter``, the number of
the adapter of ``workload.lora``'s catalog the request names. Empty optional cells mean "none".
"""

from __future__ import annotations

from distsim import inputs
from distsim.errors import InputFileError
from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow, csv_records, parse_int, parse_ns

REQUIRED = ("arrival_s", "input_tokens", "output_tokens")
OPTIONAL = ("tenant", "session", "prefix_group")
TYPED = ("type", "items", "size")  # request types: optional too
SESSION = ("wait_s", "tool_calls")  # closed-loop session replay: optional too
LORA = ("adapter",)  # LoRA adapters: optional too


def _row(path, ln: int, get) -> TraceRow:
    """A row from a field getter ``get(name) -> value or None``."""
    extra = {}
    for name in OPTIONAL:
        v = get(name)
        extra[name] = (
            None if v is None or (isinstance(v, str) and not v.strip()) else parse_int(v, name, path, ln)
        )
    row = TraceRow(
        ln,
        parse_ns(get("arrival_s"), "arrival_s", path, ln, 1_000_000_000),
        parse_int(get("input_tokens"), "input_tokens", path, ln),
        parse_int(get("output_tokens"), "output_tokens", path, ln),
        tenant=extra["tenant"],
        session=extra["session"],
        prefix_group=extra["prefix_group"],
    )
    wait, calls = get("wait_s"), get("tool_calls")
    if wait is not None and str(wait).strip():
        row.wait_ns = parse_ns(wait, "wait_s", path, ln, 1_000_000_000)
        if row.wait_ns < 0:
            raise InputFileError(path, f"wait_s must be >= 0 (got {wait})", ln)
    if calls is not None and str(calls).strip():
        row.tool_calls = parse_int(calls, "tool_calls", path, ln)
    adapter = get("adapter")
    if adapter is not None and str(adapter).strip():
        row.adapter = parse_int(adapter, "adapter", path, ln)
        if row.adapter < 0:
            raise InputFileError(path, f"adapter must be >= 0 (got {adapter})", ln)
    kind = get("type")
    if kind is not None and str(kind).strip() not in ("", "llm"):
        row.rtype = str(kind).strip()
        items, size = get("items"), get("size")
        row.items = 1 if items is None or not str(items).strip() else parse_int(items, "items", path, ln)
        row.size = 0.0 if size is None or not str(size).strip() else parse_ns(size, "size", path, ln, 1_000_000) / 1e6
        if row.items < 1 or row.size < 0:
            raise InputFileError(path, f"a {row.rtype} row needs items >= 1 and size >= 0 (got {row.items}, {row.size:g})", ln)
    return row


@READERS.register("csv")
class CsvReader(TraceReader):
    def rows(self):
        path = self.path
        for ln, rec, idx in csv_records(path, REQUIRED):
            yield _row(path, ln, lambda name, rec=rec, idx=idx: rec[idx[name]] if name in idx else None)


@READERS.register("parquet")
class ParquetReader(TraceReader):
    """Row numbers in messages count data rows from 1."""

    def rows(self):
        path = self.path
        pf = inputs.parquet_file(path)
        with inputs.arrow_errors(path):
            names = pf.schema_arrow.names
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise InputFileError(
                path, f"missing column(s) {', '.join(missing)} (columns: {', '.join(names)})"
            )
        cols = [c for c in REQUIRED + OPTIONAL + TYPED + SESSION + LORA if c in names]
        ln = 0
        with inputs.arrow_errors(path):
            batches = pf.iter_batches(batch_size=4096, columns=cols)
        while True:
            with inputs.arrow_errors(path):
                batch = next(batches, None)
                if batch is None:
                    return
                data = {c: batch.column(c).to_pylist() for c in cols}
            for i in range(batch.num_rows):
                ln += 1
                yield _row(path, ln, lambda name, i=i, data=data: data[name][i] if name in data else None)
