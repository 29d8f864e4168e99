"""What a pool's scaler sees at an evaluation, as a metrics pipeline and the gateway would report it.

Instance-reported signals (queue depth, running batch, KV use) come from the cluster's signal board, so the
signals config's scrape interval, jitter and transport delay apply to the autoscaler as to the routers;
requests outstanding and in transit are the router's own counts, always current. Values are per serving
replica (a data-parallel replica sums its engines' counts and averages their KV use). Completions are
heard as the gateway sees them finish (a watch listens to the records of the cluster, or of the runtimes'
front): the completed requests of the pool since the last evaluation, and how many of them missed their
TTFT SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from distsim.request import Request, Status

if TYPE_CHECKING:
    from distsim.signals.board import SignalBoard
    from distsim.signals.view import RouterState

COMPLETED = Status.COMPLETED


class CompletionWatch:
    """The pool's completed requests since the last look, and their TTFT SLO misses (as the client sees
    the first token: the front end's per-token lag ``output_lag_us`` included; ``default_ttft_slo_ms`` for a
    request without its own SLO). :meth:`heard` is a record listener (distsim.cluster.cluster.RecordListener)."""

    def __init__(self, engines: set[int], default_ttft_slo_ms: float = 0.0, output_lag_us: int = 0):
        self.engines = engines
        self.default_ttft_slo_ms = default_ttft_slo_ms
        self.output_lag_us = output_lag_us
        self.done = 0  # since the last look
        self.missed_slo = 0

    def heard(self, req: Request) -> None:
        """A request reached its final status."""
        if req.status != COMPLETED or (req.instance not in self.engines and req.prefill_instance not in self.engines):
            return
        self.done += 1
        self.missed_slo += self.missed(req)

    def since_last(self) -> tuple[int, int]:
        counts = self.done, self.missed_slo
        self.done = self.missed_slo = 0
        return counts

    def missed(self, req: Request) -> bool:
        """The completed request's first token came later than its TTFT SLO."""
        slo = self.default_ttft_slo_ms if req.ttft_slo_ms is None else req.ttft_slo_ms
        return (req.first_token_us + self.output_lag_us - req.arrival_us) / 1000.0 > slo


class LatencyWatch(CompletionWatch):
    """A runtime pool's completions: a non-LLM request has no first token; it misses when its result came
    later than its type's latency SLO (none: never)."""

    def missed(self, req: Request) -> bool:
        slo = req.latency_slo_ms
        return slo is not None and (req.completion_us - req.arrival_us) / 1000.0 > slo


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
    board: SignalBoard  # the side's (the cluster's, or a request type's)
    state: RouterState  # the router's, of the same side
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
