"""OpenTelemetry GenAI spans into a session trace that closed-loop sessions replay.

Input: OTLP/JSON traces, as an OpenTelemetry collector's file exporter writes them (one
``ExportTraceServiceRequest`` object per line, or one object for the whole file):
``resourceSpans[].scopeSpans[].spans[]``, each span with ``traceId``, ``name``, ``startTimeUnixNano``,
``endTimeUnixNano`` and ``attributes`` (``[{key, value: {stringValue | intValue | doubleValue}}]``).

The attributes read are the GenAI semantic conventions' (opentelemetry.io/docs/specs/semconv/gen-ai/):
``gen_ai.operation.name`` (an inference span is ``chat``, ``text_completion`` or ``generate_content``; a
tool call ``execute_tool``), ``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens`` (an inference
span's prompt and answer), and ``gen_ai.conversation.id`` (a session; spans without one group by trace).
Other spans (``invoke_agent``, ``embeddings``, HTTP ...) are left out.

Output: distsim's CSV trace (distsim.workload.traces.table) with one row per inference span:
``arrival_s`` (its start, from the earliest), ``input_tokens``, ``output_tokens``, ``session`` (0, 1, ...
in the order sessions start), ``wait_s`` (from the end of the session's previous inference span to this
one's start: the think or tool time the agent spent; empty on a session's first row) and ``tool_calls``
(the ``execute_tool`` spans of the session that started in that gap).

    python -m distsim.workload.traces.otel SPANS.json OUT.csv
    python -m distsim workload.kind=trace workload.format=csv workload.path=OUT.csv workload.num_requests=null \\
        workload.sessions.enabled=true workload.sessions.closed_loop=true
"""

from __future__ import annotations

import csv
import io
import json
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim import inputs, outputs
from distsim.errors import InputFileError, UserError
from distsim.inputs import excerpt

INFERENCE = ("chat", "text_completion", "generate_content")
TOOL = "execute_tool"
OPERATION, INPUT, OUTPUT, CONVERSATION = (
    "gen_ai.operation.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.conversation.id",
)
COLUMNS = ("arrival_s", "input_tokens", "output_tokens", "session", "wait_s", "tool_calls")


@dataclass(frozen=True)
class Span:
    session: str
    operation: str
    start_ns: int
    end_ns: int
    input_tokens: int | None
    output_tokens: int | None
    where: str  # the span, for messages


def _value(v: Any) -> Any:
    """An OTLP AnyValue's content (intValue is a string in OTLP/JSON)."""
    if not isinstance(v, dict):
        return None
    for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if kind in v:
            return v[kind]
    return None


def _int(value: Any, name: str, path: Path, where: str) -> int:
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool):
        raise InputFileError(path, f"{where}: {name} is not an integer ({excerpt(value)})")
    return number


def _objects(path: Path) -> Iterator[tuple[int, dict]]:
    """The export requests: one JSON object per line (a collector's file exporter), or one for the file."""
    text = inputs.read_text(path, max_bytes=None)
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        json.loads(first)
    except ValueError:  # the first line is not a whole object: one (pretty-printed) object for the file
        data = inputs.parse_json(text, path)
        if not isinstance(data, dict):
            raise InputFileError(path, "expected OTLP/JSON traces (an object with resourceSpans)") from None
        yield 1, data
        return
    yield from inputs.json_lines(path)


def read_spans(path: str | Path) -> list[Span]:
    """The inference and tool spans of an OTLP/JSON file, checked."""
    path = Path(path)
    spans = []
    for line, obj in _objects(path):
        resources = obj.get("resourceSpans")
        if not isinstance(resources, list):
            raise InputFileError(path, "no resourceSpans list: not OTLP/JSON traces", line)
        for rs in resources:
            for ss in (rs or {}).get("scopeSpans") or []:
                for span in (ss or {}).get("spans") or []:
                    got = _span(span, path, line)
                    if got is not None:
                        spans.append(got)
    return spans


def _span(span: Any, path: Path, line: int) -> Span | None:
    if not isinstance(span, dict):
        raise InputFileError(path, "a span is not a JSON object", line)
    attrs = {a.get("key"): _value(a.get("value")) for a in span.get("attributes") or [] if isinstance(a, dict)}
    op = attrs.get(OPERATION)
    if op not in INFERENCE and op != TOOL:
        return None
    where = f"line {line}, span {span.get('spanId', '?')} ({span.get('name', '')})"
    start = _int(span.get("startTimeUnixNano"), "startTimeUnixNano", path, where)
    end = _int(span.get("endTimeUnixNano"), "endTimeUnixNano", path, where)
    if end < start:
        raise InputFileError(path, f"{where}: ends before it starts")
    session = attrs.get(CONVERSATION) or f"trace:{span.get('traceId', '')}"
    tokens = [None, None]
    if op in INFERENCE:
        for i, name in enumerate((INPUT, OUTPUT)):
            if attrs.get(name) is None:
                raise InputFileError(path, f"{where}: an inference span without {name}")
            tokens[i] = _int(attrs[name], name, path, where)
            if tokens[i] < 1:
                raise InputFileError(path, f"{where}: {name} must be >= 1 (got {tokens[i]})")
    return Span(str(session), op, start, end, tokens[0], tokens[1], where)


def session_rows(spans: list[Span]) -> list[tuple]:
    """The CSV rows (see the module docstring), in arrival order."""
    by_session: dict[str, list[Span]] = {}
    tools: dict[str, list[int]] = {}
    for s in spans:
        if s.operation == TOOL:
            tools.setdefault(s.session, []).append(s.start_ns)
        else:
            by_session.setdefault(s.session, []).append(s)
    if not by_session:
        raise UserError("no inference spans (gen_ai.operation.name chat, text_completion or generate_content)")
    order = sorted(by_session, key=lambda k: (min(x.start_ns for x in by_session[k]), k))
    t0 = min(x.start_ns for calls in by_session.values() for x in calls)
    rows = []
    for number, key in enumerate(order):
        calls = sorted(by_session[key], key=lambda x: (x.start_ns, x.end_ns))
        starts = sorted(tools.get(key, []))
        for k, call in enumerate(calls):
            wait, n_tools = "", ""
            if k:
                prev_end = calls[k - 1].end_ns
                wait = f"{max(0, call.start_ns - prev_end) / 1e9:.6f}"
                n_tools = bisect_right(starts, call.start_ns) - bisect_left(starts, prev_end)
            rows.append((call.start_ns - t0, call.input_tokens, call.output_tokens, number, wait, n_tools))
    rows.sort(key=lambda r: (r[0], r[3]))
    return [(f"{t / 1e9:.6f}", *rest) for t, *rest in rows]


def convert(spans_path: str | Path, out_path: str | Path) -> int:
    """Write the session trace of ``spans_path`` to ``out_path``; the rows written. The output is checked
    before the spans are read, so a path that cannot be written is the first thing said."""
    outputs.prepare_file(out_path)
    rows = session_rows(read_spans(spans_path))

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(rows)
    outputs.write_text(out_path, buf.getvalue())
    return len(rows)


USAGE = "usage: python -m distsim.workload.traces.otel SPANS.json OUT.csv"


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        n = convert(argv[0], argv[1])
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        return 2
    print(f"wrote {argv[1]}: {n} inference calls")
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim", lambda: main(sys.argv[1:]))
