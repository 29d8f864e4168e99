"""Queue and SLO: scale up on queued requests or TTFT SLO misses, down when the pool is nearly idle.

At each evaluation, with q the queued requests per serving replica (queued on the instance or in transit
to it) and m the share of the pool's requests completed since the last evaluation that missed their TTFT
SLO (what the gateway sees):

- q > ``queue_per_replica`` or m > ``max_ttft_miss_rate``: scale up, to ceil(serving x q /
  queue_per_replica) when the queue is the cause, and by at least one replica;
- nothing queued, no miss, and outstanding requests per serving replica below ``scale_down_outstanding``:
  scale down to the replicas that would carry that many each, ceil(outstanding / scale_down_outstanding);
- else keep the count.

This is the shape of llm-d's saturation analyser (scale up when replicas queue, down when spare) with an
SLO trigger added, as BLIS's and llm-d's SLO-driven scalers have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distsim import validators
from distsim.autoscale.base import Scaler, ScalerParams
from distsim.autoscale.registry import SCALERS


@dataclass(frozen=True)
class QueueSloParams(ScalerParams):
    queue_per_replica: float = 4.0  # scale up above this many queued requests per serving replica
    max_ttft_miss_rate: float = 0.05  # scale up above this share of recent completions missing the TTFT SLO
    scale_down_outstanding: float = 8.0  # scale down below this many outstanding requests per serving replica

    def check(self, key: str) -> None:
        validators.positive(f"{key}.queue_per_replica", self.queue_per_replica)
        validators.fraction(f"{key}.max_ttft_miss_rate", self.max_ttft_miss_rate)
        validators.positive(f"{key}.scale_down_outstanding", self.scale_down_outstanding)


@SCALERS.register("queue_slo")
class QueueSlo(Scaler):
    Params = QueueSloParams
    reads_completions = True

    def desired(self, probe) -> int:
        p = self.params
        done, missed = probe.completions()
        if probe.serving == 0:
            return probe.target
        queued = probe.mean("queue_depth")
        if queued > p.queue_per_replica or (done and missed / done > p.max_ttft_miss_rate):
            by_queue = math.ceil(probe.serving * queued / p.queue_per_replica - 1e-9)
            return max(probe.target + 1, by_queue)
        outstanding = probe.per_replica("outstanding")
        if queued == 0 and missed == 0 and outstanding.mean() < p.scale_down_outstanding:
            return max(1, math.ceil(outstanding.sum() / p.scale_down_outstanding - 1e-9))
        return probe.target
