"""Mooncake JSONL traces (kvcache-ai/Mooncake, FAST'25 release).

One JSON object per line: ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``,
the ids of the prompt's 512-token blocks (equal ids: equal content, and ids form prefix chains).
"""

from __future__ import annotations

from distsim import inputs
from distsim.errors import InputFileError
from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow, parse_int, parse_ns

BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@READERS.register("mooncake")
class MooncakeReader(TraceReader):
    block_tokens = BLOCK_TOKENS

    def rows(self):
        path = self.path
        for ln, obj in inputs.json_lines(path):
            for name in FIELDS:
                if name not in obj:
                    raise InputFileError(path, f"missing field {name!r}", ln)
            ts = parse_ns(obj["timestamp"], "timestamp", path, ln, 1_000_000)
            inp = parse_int(obj["input_length"], "input_length", path, ln)
            out = parse_int(obj["output_length"], "output_length", path, ln)
            ids = obj["hash_ids"]
            if not isinstance(ids, list) or not all(type(x) is int for x in ids):
                raise InputFileError(path, "field 'hash_ids': must be a list of integers", ln)
            need = -(-inp // BLOCK_TOKENS)
            if inp >= 0 and len(ids) != need:
                raise InputFileError(
                    path,
                    f"field 'hash_ids': {len(ids)} ids, but input_length {inp} needs ceil({inp}/{BLOCK_TOKENS}) = {need}",
                    ln,
                )
            yield TraceRow(ln, ts, inp, out, ids)
