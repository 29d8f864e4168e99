"""The workload's settings that reach past the request source: its default SLOs (``workload.slo``) and
the classes whose SLO allows shedding.

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
    sheddable: frozenset[str] = frozenset()  # the SLO classes whose SLO allows shedding (distsim.metrics.shedding)


def slo_defaults(workload: WorkloadConfig) -> SloDefaults:
    slo = workload.slo
    sheddable = frozenset(str(c.name) for c in slo.classes or () if c.sheddable)
    return SloDefaults(float(slo.ttft_ms), float(slo.tpot_ms), sheddable)
