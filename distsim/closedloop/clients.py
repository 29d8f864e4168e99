"""Closed-loop clients' feature: refuses what the clients cannot drive, hands the source the front end's
reply lag, and reports the ``client`` request column and summary.json's ``clients`` section (per stage:
clients, requests sent and completed, throughput, mean E2E, mean requests in flight)."""

from __future__ import annotations

from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts
from distsim.metrics.summary import rnd
from distsim.workload.clients import ClosedLoopSource


def refuse_capacity(scenario: Any, key: str) -> None:
    """The capacity fitness speeds a fixed stream of arrivals up; a closed loop makes its own."""
    if scenario.fitness.kind == "capacity":
        raise ConfigError("fitness.kind", f"capacity searches an arrival rate; {key} sends as replies come: "
                          "sweep the clients (or sessions) instead")


class ClientsFeature(Feature):
    name = "clients"

    def __init__(self) -> None:
        self.source: ClosedLoopSource | None = None

    @staticmethod
    def check(scenario: Any) -> None:
        """Request types (a batching runtime's requests) go through a typed front the clients do not hear;
        the capacity fitness needs a fixed stream of arrivals."""
        if scenario.typed or scenario.runtimes:
            raise ConfigError("workload.clients", "closed-loop clients serve LLM requests only: unset workload.mix")
        refuse_capacity(scenario, "workload.clients")

    def attach(self, parts: Parts) -> None:
        """A client reads its reply when the last token reaches it: after the front end's lag, if any."""
        self.source = parts.workload
        self.source.reply_lag_us = parts.recorder.output_lag_us

    def report(self, m: Measures) -> dict[str, Any]:
        src = self.source
        assert src is not None
        table = m.table
        ids = table["request_id"]
        client = np.asarray(src.client_of, dtype=np.int64)[ids] if len(ids) else np.zeros(0, dtype=np.int64)
        table.add("client", client, "int64")
        arrival = table["arrival_ms"]
        done = _completed(table)
        reply = np.where(np.isfinite(table["e2e_ms"]), arrival + np.nan_to_num(table["e2e_ms"]), m.end_us / 1000.0)
        settings = src.settings
        bounds = [s.start_us / 1000.0 for s in settings.stages]
        end_ms = m.end_us / 1000.0 if settings.end_us is None else settings.end_us / 1000.0
        stages = []
        for i, stage in enumerate(settings.stages):
            lo, hi = bounds[i], bounds[i + 1] if i + 1 < len(bounds) else end_ms
            sent = (arrival >= lo) & (arrival < hi)
            span_s = max(hi - lo, 1e-9) / 1000.0
            overlap = np.clip(np.minimum(reply, hi) - np.maximum(arrival, lo), 0.0, None)
            e2e = table["e2e_ms"][sent & done]
            stages.append({
                "clients": stage.clients,
                "start_s": rnd(lo / 1000.0),
                "end_s": rnd(hi / 1000.0),
                "sent": int(sent.sum()),
                "completed": int((sent & done).sum()),
                "requests_per_s": rnd((sent & done).sum() / span_s),
                "e2e_ms_mean": rnd(e2e.mean()) if len(e2e) else None,
                "in_flight_mean": rnd(overlap.sum() / 1000.0 / span_s),
            })
        return {"mode": settings.mode, "clients": settings.max_clients, "stages": stages}


def _completed(table) -> np.ndarray:
    """The completed rows (``status`` is a category column)."""
    names = table.categories("status")
    return table["status"] == names.index("completed")
