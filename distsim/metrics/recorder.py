"""Collects one record per request as it reaches its final status.

Records are small tuples appended in completion order; they become a column table once, at the end,
so the hot loop pays one append per request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from distsim.request import STATUS_NAMES, Request, Status

_FIELDS = (
    "request_id",
    "tenant",
    "slo_class",
    "session_id",
    "arrival_us",
    "status",
    "instance",
    "prefill_instance",
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


class Recorder:
    __slots__ = ("records", "default_ttft_slo_ms", "default_tpot_slo_ms")

    def __init__(self, default_ttft_slo_ms: float, default_tpot_slo_ms: float):
        self.records: list[tuple] = []
        self.default_ttft_slo_ms = default_ttft_slo_ms
        self.default_tpot_slo_ms = default_tpot_slo_ms

    def done(self, req: Request) -> None:
        self.records.append(
            (
                req.request_id,
                req.tenant,
                req.slo_class,
                req.session_id,
                req.arrival_us,
                int(req.status),
                req.instance,
                req.prefill_instance,
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

    def table(self) -> pd.DataFrame:
        """requests.parquet's columns, one row per request, sorted by request_id."""
        if self.records:
            cols = list(zip(*self.records))
        else:
            cols = [()] * len(_FIELDS)
        raw = {name: col for name, col in zip(_FIELDS, cols)}
        order = np.argsort(np.asarray(raw["request_id"], dtype=np.int64), kind="stable")

        def ints(name):
            return np.asarray(raw[name], dtype=np.int64)[order]

        def ms(name):
            us = ints(name)
            out = us.astype(np.float64) / 1000.0
            out[us < 0] = np.nan
            return out

        def slo(name, default):
            vals = np.asarray([default if v is None else v for v in raw[name]], dtype=np.float64)
            return vals[order]

        arrival_us = ints("arrival_us")
        first_sched_us = ints("first_scheduled_us")
        first_token_us = ints("first_token_us")
        completion_us = ints("completion_us")

        def since_arrival(us):
            """Milliseconds from arrival, computed in integer microseconds (exact), NaN for 'never'."""
            out = (us - arrival_us).astype(np.float64) / 1000.0
            out[us < 0] = np.nan
            return out

        status_codes = ints("status")
        out_tokens = ints("output_tokens")
        ttft = since_arrival(first_token_us)
        e2e = since_arrival(completion_us)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out_tokens > 1, (completion_us - first_token_us) / 1000.0 / (out_tokens - 1), np.nan)
        tpot[status_codes != int(Status.COMPLETED)] = np.nan
        frame = pd.DataFrame(
            {
                "request_id": ints("request_id"),
                "tenant": ints("tenant"),
                "slo_class": pd.array(np.asarray(raw["slo_class"], dtype=object)[order], dtype="string"),
                "session_id": ints("session_id"),
                "arrival_ms": ms("arrival_us"),
                "status": pd.Categorical.from_codes(status_codes, categories=[STATUS_NAMES[s] for s in Status]),
                "instance": ints("instance"),
                "prefill_instance": ints("prefill_instance"),
                "input_tokens": ints("input_tokens"),
                "output_tokens": out_tokens,
                "cached_tokens": ints("cached_tokens"),
                "first_token_ms": ms("first_token_us"),
                "completion_ms": ms("completion_us"),
                "ttft_ms": ttft,
                "tpot_ms": tpot,
                "e2e_ms": e2e,
                "queue_ms": since_arrival(first_sched_us),
                "preemptions": ints("preemptions"),
                "ttft_slo_ms": slo("ttft_slo_ms", self.default_ttft_slo_ms),
                "tpot_slo_ms": slo("tpot_slo_ms", self.default_tpot_slo_ms),
            }
        )
        met = (
            (frame["status"] == "completed").to_numpy()
            & (np.nan_to_num(ttft, nan=np.inf) <= frame["ttft_slo_ms"].to_numpy())
            & (np.nan_to_num(tpot, nan=0.0) <= frame["tpot_slo_ms"].to_numpy())
        )
        frame["met_slo"] = met
        return frame
