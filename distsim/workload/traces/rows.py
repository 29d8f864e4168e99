"""The row every trace reader yields, and exact parsers for the fields readers share.

Times are integer nanoseconds (absolute, in the file's own origin): decimal seconds, milliseconds and
Azure's seven fractional digits all convert exactly, so spans read back to the microsecond.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from distsim import inputs
from distsim.errors import InputFileError
from distsim.inputs import excerpt


@dataclass(slots=True)
class TraceRow:
    line: int  # 1-based line (or row) number in the file, for messages
    time_ns: int
    input_tokens: int
    output_tokens: int
    hash_ids: list | None = None  # Mooncake: ids of 512-token blocks
    tenant: int | None = None
    session: int | None = None
    prefix_group: int | None = None
    rtype: str | None = None  # request type (workload.mix); None or "llm": an LLM request
    items: int | None = None  # a non-LLM request's batch items (None: 1)
    size: float | None = None  # its per-item size in its type's unit (None: 0)
    wait_ns: int | None = None  # closed-loop sessions: from the previous turn's reply to this turn (None: 0)
    tool_calls: int | None = None  # closed-loop sessions: the tool calls in that wait (None: 0)
    adapter: int | None = None  # the LoRA adapter the request names, of workload.lora's catalog (None: the base model)


class TraceReader:
    """Streams a trace file's rows. ``skipped`` counts rows left out on purpose (e.g. failed requests);
    ``block_tokens``: the tokens per hash id of a format whose rows carry prompt block ids (None: none do)."""

    block_tokens: int | None = None
    seed = 0  # a reader that draws its rows (ServeGen's windows) draws them from this (the run's seed)

    def __init__(self, path):
        self.path = path
        self.skipped: dict[str, int] = {}

    def rows(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


_DECIMAL = re.compile(r"^\s*([+-]?)(\d*)(?:\.(\d*))?\s*$")


def parse_int(text, field: str, path, line: int) -> int:
    """An integer field; a float with an integral value (``12.0``) is accepted."""
    if isinstance(text, bool):
        raise InputFileError(path, f"field {field!r}: not an integer: {excerpt(text)}", line)
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        if text.is_integer():
            return int(text)
        raise InputFileError(path, f"field {field!r}: not an integer: {excerpt(text)}", line)
    s = str(text).strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        x = float(s)
    except ValueError:
        raise InputFileError(path, f"field {field!r}: not an integer: {excerpt(text)}", line) from None
    if x.is_integer():
        return int(x)
    raise InputFileError(path, f"field {field!r}: not an integer: {excerpt(text)}", line)


def parse_ns(text, field: str, path, line: int, unit_ns: int) -> int:
    """A time in units of ``unit_ns`` nanoseconds (1e9 for seconds, 1e6 for ms), as integer ns.

    Plain decimals convert exactly; other numbers (exponents, JSON floats) through a float.
    """
    if isinstance(text, bool):
        raise InputFileError(path, f"field {field!r}: not a number: {excerpt(text)}", line)
    if isinstance(text, int):
        return text * unit_ns
    if not isinstance(text, float):
        m = _DECIMAL.match(str(text))
        if m and (m.group(2) or m.group(3)):
            sign, whole, frac = m.group(1), m.group(2) or "0", m.group(3) or ""
            digits = len(str(unit_ns)) - 1  # unit_ns is a power of ten
            frac = (frac + "0" * digits)[:digits] if digits else ""
            rest = m.group(3)[digits:] if m.group(3) and len(m.group(3)) > digits else ""
            ns = int(whole) * unit_ns + (int(frac) if frac else 0)
            if rest and rest[0] >= "5":
                ns += 1
            return -ns if sign == "-" else ns
        try:
            text = float(str(text))
        except ValueError:
            raise InputFileError(path, f"field {field!r}: not a number: {excerpt(text)}", line) from None
    if text != text or text in (float("inf"), float("-inf")):
        raise InputFileError(path, f"field {field!r}: not a finite number: {excerpt(text)}", line)
    return round(text * unit_ns)


def header_index(header: list[str], required, path) -> dict[str, int]:
    """Column positions by name; a missing required column is an error naming the file."""
    names = [h.strip() for h in header]
    missing = [c for c in required if c not in names]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)} (header: {','.join(names)})", 1)
    return {n: i for i, n in enumerate(names)}


def csv_records(path, required: Sequence[str]) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    """Yield (line number, fields, column index) for every non-blank record of a CSV trace, after
    checking the header names the ``required`` columns and that every record has the header's width."""
    with inputs.csv_reader(path) as reader:
        header = next(reader, None)
        if header is None:
            return
        idx = header_index(header, required, path)
        width = len(header)
        for rec in reader:
            ln = reader.line_num
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue
            if len(rec) != width:
                raise InputFileError(path, f"expected {width} fields, got {len(rec)}", ln)
            yield ln, rec, idx
