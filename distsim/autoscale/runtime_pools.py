"""Autoscaling the batching runtimes' pools (distsim.runtime) with the LLM cluster's autoscaler.

Why one autoscaler for both: the run has one billing, one timeline and one moment to stop (nothing left to
do for either side). The front's runtime replicas are numbered after the cluster's instances, so their
global indices are instances.parquet's rows and billing needs nothing new. Each type's replicas are a
side of their own (distsim.autoscale.sides.RuntimeSide): their type's board, router state and view.
A scaler of a runtime pool reads queue depth (requests queued at a replica plus on their way to it),
running (requests in running batches) and outstanding (routed and not finished) per serving replica,
and queue_slo's miss rate counts results later than their type's latency SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from distsim.autoscale.controller import Autoscaler
from distsim.autoscale.probe import LatencyWatch
from distsim.autoscale.sides import RuntimeSide

if TYPE_CHECKING:
    from distsim.runtime.front import TypedFront
    from distsim.runtime.settings import RuntimePoolSpec


def attach_runtime_autoscaling(front: TypedFront, pools: Sequence[RuntimePoolSpec], seed: int) -> Autoscaler:
    """Scale ``front``'s autoscaled runtime ``pools`` (built with ``max`` replicas each), with the cluster's
    autoscaler if it has one (else a new one, set as ``cluster.autoscaler``), which from now stops only once
    neither the LLM cluster nor the runtimes have anything left to do."""
    cluster = front.cluster
    autoscaler = cluster.autoscaler  # the LLM pools' autoscaler, if any (a fleet has none)
    if autoscaler is None:
        autoscaler = Autoscaler(cluster, [], seed)
        cluster.record_listeners.append(autoscaler.request_recorded)
        cluster.autoscaler = autoscaler
    front.record_listeners.append(autoscaler.request_recorded)
    autoscaler.units += len(front.runtimes)
    autoscaler.also_active(front._active)
    sides = {name: RuntimeSide(route) for name, route in front.routes.items()}
    added = []
    for spec in pools:
        if spec.autoscale is None:
            continue
        engines = [(r.index,) for r in front.runtimes if r.pool is spec]
        watch = LatencyWatch({e for (e,) in engines})
        front.record_listeners.append(watch.heard)
        added.append(autoscaler.add(spec, engines, watch, sides[spec.serves], seed))
    autoscaler.start(added)
    return autoscaler
