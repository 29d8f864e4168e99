"""The workload's settings that reach past the request source: its default SLOs (``workload.slo``).

A request without its own class's SLO is held to these; the cluster reads them for hedging delays given as
a fraction of the TTFT SLO. The rest of ``workload.*`` is checked as the source is built (distsim.workload.source).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.workload.schema import WorkloadConfig


@dataclass(frozen=True)
class SloDefaults:
    """The workload's default SLOs (a request without its own class's SLO is held to these). No defaults:
    ``workload.slo`` in the config schema holds them."""

    ttft_ms: float
    tpot_ms: float


def slo_defaults(workload: WorkloadConfig) -> SloDefaults:
    slo = workload.slo
    return SloDefaults(float(slo.ttft_ms), float(slo.tpot_ms))
