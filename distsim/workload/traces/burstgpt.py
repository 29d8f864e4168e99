"""BurstGPT CSV traces (HPMLL/BurstGPT): ChatGPT and GPT-4 usage logs.

Columns ``Timestamp`` (seconds), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``,
``Log Type`` (newer releases add more; extra columns are ignored). Rows with zero response tokens are
failed requests: they are skipped and counted, as are rows with zero request tokens.
"""

from __future__ import annotations

import csv

from distsim.errors import InputFileError
from distsim.workload.traces.azure import header_index
from distsim.workload.traces.rows import TraceReader, TraceRow, parse_int, parse_ns

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class BurstGPTReader(TraceReader):
    def rows(self):
        path = self.path
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return
            idx = header_index(header, COLUMNS, path)
            it, ir, io = idx["Timestamp"], idx["Request tokens"], idx["Response tokens"]
            width = len(header)
            for rec in reader:
                ln = reader.line_num
                if not rec or (len(rec) == 1 and not rec[0].strip()):
                    continue
                if len(rec) != width:
                    raise InputFileError(path, f"expected {width} fields, got {len(rec)}", ln)
                ts = parse_ns(rec[it], "Timestamp", path, ln, 1_000_000_000)
                inp = parse_int(rec[ir], "Request tokens", path, ln)
                out = parse_int(rec[io], "Response tokens", path, ln)
                if out == 0:
                    self.skip("failed (zero response tokens)")
                    continue
                if inp == 0:
                    self.skip("zero request tokens")
                    continue
                yield TraceRow(ln, ts, inp, out)
