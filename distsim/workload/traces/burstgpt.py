"""BurstGPT CSV traces (HPMLL/BurstGPT): ChatGPT and GPT-4 usage logs.

Columns ``Timestamp`` (seconds), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``,
``Log Type`` (newer releases add more; extra columns are ignored). Rows with zero response tokens are
failed requests: they are skipped and counted, as are rows with zero request tokens.
"""

from __future__ import annotations

from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow, csv_records, parse_int, parse_ns

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


@READERS.register("burstgpt")
class BurstGPTReader(TraceReader):
    def rows(self):
        path = self.path
        for ln, rec, idx in csv_records(path, COLUMNS):
            ts = parse_ns(rec[idx["Timestamp"]], "Timestamp", path, ln, 1_000_000_000)
            inp = parse_int(rec[idx["Request tokens"]], "Request tokens", path, ln)
            out = parse_int(rec[idx["Response tokens"]], "Response tokens", path, ln)
            if out == 0:
                self.skip("failed (zero response tokens)")
                continue
            if inp == 0:
                self.skip("zero request tokens")
                continue
            yield TraceRow(ln, ts, inp, out)
