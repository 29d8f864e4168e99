"""Collects one record per request as it reaches its final status.

Records are small tuples appended in completion order, so the hot loop pays one append per request;
every ``CHUNK`` of them are packed into numpy columns (about 140 bytes a request where a tuple and its
int and float objects take some 370), and the columns become the request table once, at the end. The
table is numpy columns (distsim.metrics.columns), a DataFrame only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from distsim.metrics.columns import Table
from distsim.request import STATUS_NAMES, Request, Status

if TYPE_CHECKING:
    import pandas as pd

_FIELDS = (
    "request_id",
    "tenant",
    "slo_class",
    "session_id",
    "arrival_us",
    "status",
    "instance",
    "prefill_instance",
    "route_us",
    "enqueue_us",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "first_scheduled_us",
    "first_token_us",
    "completion_us",
    "preemptions",
    "ttft_slo_ms",
    "tpot_slo_ms",
)
_OBJECTS = ("slo_class",)  # kept as Python objects
_OPTIONAL = ("ttft_slo_ms", "tpot_slo_ms")  # floats or None: packed as float64 and a mask of the Nones
CHUNK = 4096  # records packed into columns at a time


class Recorder:
    __slots__ = ("records", "packed", "n_packed", "default_ttft_slo_ms", "default_tpot_slo_ms", "output_lag_us")

    def __init__(self, default_ttft_slo_ms: float, default_tpot_slo_ms: float, output_lag_us: int = 0):
        self.records: list[tuple] = []  # the latest records, fewer than CHUNK: the rest are in ``packed``
        self.packed: list[dict[str, np.ndarray]] = []  # earlier records, CHUNK at a time, as columns
        self.n_packed = 0  # records in ``packed``
        self.default_ttft_slo_ms = default_ttft_slo_ms
        self.default_tpot_slo_ms = default_tpot_slo_ms
        self.output_lag_us = output_lag_us  # the front end's per-token lag: tokens reach the client this late

    def done(self, req: Request) -> None:
        records = self.records
        records.append(
            (
                req.request_id,
                req.tenant,
                req.slo_class,
                req.session_id,
                req.arrival_us,
                int(req.status),
                req.instance,
                req.prefill_instance,
                req.route_us,
                req.enqueue_us,
                req.prompt_tokens,
                req.output_tokens,
                req.cached_tokens,
                req.first_scheduled_us,
                req.first_token_us,
                req.completion_us,
                req.preemptions,
                req.ttft_slo_ms,
                req.tpot_slo_ms,
            )
        )
        if len(records) >= CHUNK:
            self.packed.append(_pack(records))
            self.n_packed += len(records)
            self.records = []

    def met_slo(self, req: Request) -> bool:
        """Whether a request with its final status met both SLOs: :meth:`columns`' ``met_slo`` for one
        request, as it is recorded (a capacity trial counts the misses as they come, distsim.metrics.capacity)."""
        if req.status != Status.COMPLETED or req.first_token_us < 0:
            return False
        ttft_slo = self.default_ttft_slo_ms if req.ttft_slo_ms is None else req.ttft_slo_ms
        if (req.first_token_us + self.output_lag_us - req.arrival_us) / 1000.0 > ttft_slo:
            return False
        if req.output_tokens <= 1:
            return True
        tpot_slo = self.default_tpot_slo_ms if req.tpot_slo_ms is None else req.tpot_slo_ms
        return (req.completion_us - req.first_token_us) / 1000.0 / (req.output_tokens - 1) <= tpot_slo

    def __len__(self) -> int:
        """Requests recorded so far."""
        return self.n_packed + len(self.records)

    def _raw(self) -> dict[str, np.ndarray]:
        """Every record as columns, in the order recorded; they replace the chunks (one copy, not two)."""
        parts = [*self.packed, _pack(self.records)]
        raw = {name: np.concatenate([p[name] for p in parts]) for name in parts[-1]}
        self.packed, self.n_packed, self.records = [raw], len(raw["request_id"]), []
        return raw

    def rows(self) -> list[tuple]:
        """Every record as a tuple of ``_FIELDS``, in the order recorded (for tests)."""
        c = self._raw()
        cols = [c[name].tolist() for name in _FIELDS]
        for name in _OPTIONAL:
            values = cols[_FIELDS.index(name)]
            for i in np.flatnonzero(c[name + "?"]).tolist():
                values[i] = None
        return list(zip(*cols))

    def table(self) -> pd.DataFrame:
        """requests.parquet's columns as a DataFrame, one row per request, sorted by request_id."""
        return self.columns().to_pandas()

    def columns(self) -> Table:
        """requests.parquet's columns, one row per request, sorted by request_id."""
        c = _Columns(self._raw())
        status_codes = c.ints("status")
        out_tokens = c.ints("output_tokens")
        first_token_us, completion_us = c.ints("first_token_us"), c.ints("completion_us")
        if self.output_lag_us:  # as the client sees them
            first_token_us = np.where(first_token_us >= 0, first_token_us + self.output_lag_us, first_token_us)
            completion_us = np.where(completion_us >= 0, completion_us + self.output_lag_us, completion_us)
        ttft = c.since_arrival(first_token_us)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out_tokens > 1, (completion_us - first_token_us) / 1000.0 / (out_tokens - 1), np.nan)
        tpot[status_codes != int(Status.COMPLETED)] = np.nan
        ttft_slo, tpot_slo = c.slo("ttft_slo_ms", self.default_ttft_slo_ms), c.slo("tpot_slo_ms", self.default_tpot_slo_ms)
        met_slo = (
            (status_codes == int(Status.COMPLETED))
            & (np.nan_to_num(ttft, nan=np.inf) <= ttft_slo)
            & (np.nan_to_num(tpot, nan=0.0) <= tpot_slo)
        )
        t = Table()
        t.add("request_id", c.ints("request_id"), "int64").add("tenant", c.ints("tenant"), "int64")
        t.add("slo_class", c.raw["slo_class"][c.order], "string")
        t.add("session_id", c.ints("session_id"), "int64").add("arrival_ms", c.ms("arrival_us"), "float64")
        t.add("status", status_codes, "category", [STATUS_NAMES[s] for s in Status])
        for name in ("instance", "prefill_instance", "input_tokens"):
            t.add(name, c.ints(name), "int64")
        t.add("output_tokens", out_tokens, "int64").add("cached_tokens", c.ints("cached_tokens"), "int64")
        for name, field in (("route_ms", "route_us"), ("enqueue_ms", "enqueue_us"), ("schedule_ms", "first_scheduled_us")):
            t.add(name, c.ms(field), "float64")  # the lifecycle in integer microseconds, as milliseconds (NaN: never)
        t.add("first_token_ms", c.ms_of(first_token_us), "float64").add("completion_ms", c.ms_of(completion_us), "float64")
        t.add("ttft_ms", ttft, "float64").add("tpot_ms", tpot, "float64")
        t.add("e2e_ms", c.since_arrival(completion_us), "float64")
        t.add("queue_ms", c.since_arrival(c.ints("first_scheduled_us")), "float64")
        t.add("preemptions", c.ints("preemptions"), "int64")
        t.add("ttft_slo_ms", ttft_slo, "float64").add("tpot_slo_ms", tpot_slo, "float64")
        return t.add("met_slo", met_slo, "bool")


def _pack(records: list[tuple]) -> dict[str, np.ndarray]:
    """Records as columns: int64, object (``_OBJECTS``), float64 with NaN for None and the Nones' mask
    (``_OPTIONAL``, the mask under the name followed by ``?``)."""
    cols = dict(zip(_FIELDS, zip(*records))) if records else dict.fromkeys(_FIELDS, ())
    out = {}
    for name, values in cols.items():
        if name in _OBJECTS:
            out[name] = np.empty(len(values), dtype=object)
            out[name][:] = values
        elif name in _OPTIONAL:
            nones = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
            out[name + "?"] = nones
        else:
            out[name] = np.array(values, dtype=np.int64)
    return out


class _Columns:
    """The records as columns in request_id order, with the conversions the table needs."""

    def __init__(self, raw: dict[str, np.ndarray]):
        self.raw = raw
        self.order = np.argsort(np.asarray(self.raw["request_id"], dtype=np.int64), kind="stable")
        self.arrival_us = self.ints("arrival_us")

    def ints(self, name: str) -> np.ndarray:
        return np.asarray(self.raw[name], dtype=np.int64)[self.order]

    def ms(self, name: str) -> np.ndarray:
        return self.ms_of(self.ints(name))

    def ms_of(self, us: np.ndarray) -> np.ndarray:
        out = us.astype(np.float64) / 1000.0
        out[us < 0] = np.nan
        return out

    def slo(self, name: str, default: float) -> np.ndarray:
        return np.where(self.raw[name + "?"], default, self.raw[name])[self.order]

    def since_arrival(self, us: np.ndarray) -> np.ndarray:
        """Milliseconds from arrival, computed in integer microseconds (exact), NaN for 'never'."""
        out = (us - self.arrival_us).astype(np.float64) / 1000.0
        out[us < 0] = np.nan
        return out
