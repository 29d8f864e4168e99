"""What a pool's scaler sees at an evaluation, as a metrics pipeline and the gateway would report it.

Instance-reported signals (queue depth, running batch, KV use) come from the cluster's signal board, so the
signals config's scrape interval, jitter and transport delay apply to the autoscaler as to the routers;
requests outstanding and in transit are the router's own counts, always current. Values are per serving
replica (a data-parallel replica sums its engines' counts and averages their KV use). Completions are
read from the recorder as the gateway sees them finish: the completed requests of the pool since the last
evaluation, and how many of them missed their TTFT SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distsim.metrics.recorder import _FIELDS
from distsim.request import Status

_STATUS, _INSTANCE, _PREFILL = _FIELDS.index("status"), _FIELDS.index("instance"), _FIELDS.index("prefill_instance")
_ARRIVAL, _FIRST, _SLO = _FIELDS.index("arrival_us"), _FIELDS.index("first_token_us"), _FIELDS.index("ttft_slo_ms")
_ID, _COMPLETION = _FIELDS.index("request_id"), _FIELDS.index("completion_us")


class CompletionWatch:
    """The pool's completed requests since the last look, and their TTFT SLO misses (as the client sees
    the first token: the front end's per-token lag included)."""

    def __init__(self, recorder: Any, engines: set[int]):
        self.recorder = recorder
        self.engines = engines
        self.cursor = 0

    def since_last(self) -> tuple[int, int]:
        records = self.recorder.records
        done = missed = 0
        lag, default = self.recorder.output_lag_us, self.recorder.default_ttft_slo_ms
        for rec in records[self.cursor :]:
            if rec[_STATUS] != Status.COMPLETED or (rec[_INSTANCE] not in self.engines and rec[_PREFILL] not in self.engines):
                continue
            done += 1
            missed += self.missed(rec, lag, default)
        self.cursor = len(records)
        return done, missed

    def missed(self, rec: tuple, lag: int, default: float) -> bool:
        """The completed request's first token came later than its TTFT SLO."""
        slo = default if rec[_SLO] is None else rec[_SLO]
        return (rec[_FIRST] + lag - rec[_ARRIVAL]) / 1000.0 > slo


class LatencyWatch(CompletionWatch):
    """A runtime pool's completions: a non-LLM request has no first token; it misses when its result came
    later than its type's latency SLO (none: never)."""

    def missed(self, rec: tuple, lag: int, default: float) -> bool:
        slo = self.recorder.typed[rec[_ID]][3]
        return slo is not None and (rec[_COMPLETION] - rec[_ARRIVAL]) / 1000.0 > slo


@dataclass
class PoolProbe:
    """One evaluation's view of a pool. ``engines``: the serving replicas' engines, replica by replica."""

    now_us: int
    serving: int
    provisioning: int
    draining: int
    target: int  # the replicas asked for so far (serving + provisioning)
    engines: np.ndarray
    engines_per_replica: int
    board: Any
    state: Any  # the router's RouterState
    watch: CompletionWatch

    def per_replica(self, name: str) -> np.ndarray:
        """Signal ``name`` (see base.SCALING_SIGNALS) for each serving replica, float64."""
        e = self.engines
        if name == "outstanding":
            values = self.state.outstanding[e]
        elif name == "queue_depth":  # queued on the instance plus routed there and still on the way
            values = self.board.read("queue_depth")[e] + self.state.in_transit[e]
        else:
            values = self.board.read(name)[e]
        values = np.asarray(values, dtype=np.float64).reshape(-1, self.engines_per_replica)
        return values.mean(axis=1) if name == "kv_utilization" else values.sum(axis=1)

    def mean(self, name: str) -> float:
        """The signal's mean over serving replicas (0 when none serves)."""
        values = self.per_replica(name)
        return float(values.mean()) if values.size else 0.0

    def completions(self) -> tuple[int, int]:
        """(completed, TTFT SLO missed) among the pool's requests finished since the last evaluation."""
        return self.watch.since_last()
