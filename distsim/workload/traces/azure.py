"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024).

CSV with header ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP like
``2023-11-16 18:17:03.9799600`` (seven fractional digits, no zone; 2024 files add ``+00:00``).
Times are parsed exactly to the nanosecond; arrivals count from the first row.
"""

from __future__ import annotations

import datetime as dt
import re

from distsim.errors import InputFileError
from distsim.inputs import excerpt
from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow, csv_records, parse_int

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?$")


def parse_timestamp_ns(text: str, path, line: int) -> int:
    """Nanoseconds since 1970-01-01 (UTC when the stamp has a zone, else as written)."""
    m = _TS.match(text.strip())
    if not m:
        raise InputFileError(
            path,
            f"field 'TIMESTAMP': not a timestamp like 2023-11-16 18:17:03.9799600: {excerpt(text)}",
            line,
        )
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    try:
        days = dt.date(y, mo, d).toordinal() - 719163  # date(1970, 1, 1).toordinal()
    except ValueError as err:
        raise InputFileError(path, f"field 'TIMESTAMP': {err}: {excerpt(text)}", line) from None
    if h > 23 or mi > 59 or s > 60:
        raise InputFileError(path, f"field 'TIMESTAMP': time out of range: {excerpt(text)}", line)
    frac = (m.group(7) or "").ljust(9, "0")
    ns = ((days * 24 + h) * 60 + mi) * 60 + s
    ns = ns * 1_000_000_000 + int(frac)
    zone = m.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        ns -= sign * (int(digits[:2]) * 60 + int(digits[2:])) * 60 * 1_000_000_000
    return ns


@READERS.register("azure")
class AzureReader(TraceReader):
    def rows(self):
        path = self.path
        for ln, rec, idx in csv_records(path, COLUMNS):
            yield TraceRow(
                ln,
                parse_timestamp_ns(rec[idx["TIMESTAMP"]], path, ln),
                parse_int(rec[idx["ContextTokens"]], "ContextTokens", path, ln),
                parse_int(rec[idx["GeneratedTokens"]], "GeneratedTokens", path, ln),
            )
