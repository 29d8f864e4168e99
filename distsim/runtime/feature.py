"""Request types and their batching runtimes as a run's feature: the recorder that keeps each request's
type, the front that routes each type to its own replicas (distsim.runtime.build), the runtimes' rows of
instances.parquet and summary.json's ``types`` (distsim.runtime.report)."""

from __future__ import annotations

from typing import Any

from distsim.feature import Feature, Measures, Parts


class TypesFeature(Feature):
    name = "types"

    def prepare(self, parts: Parts) -> None:
        if parts.typed:  # the type columns of requests.parquet
            from distsim.runtime.report import TypedRecorder

            parts.recorder_cls = TypedRecorder

    def attach(self, parts: Parts) -> None:
        """With runtime pools: the front over the LLM cluster (resolve refuses them with cells)."""
        if not parts.runtimes:
            return
        from distsim.runtime.build import attach_runtimes

        front = attach_runtimes(parts.clusters[0], parts.runtimes, parts.policy, parts.signals, parts.loop, parts.recorder,
                                seed=parts.seed, ttft_slo_ms=parts.slo.ttft_ms)
        parts.world = front
        parts.replicas[:] = front.runtimes

    def instance_columns(self, m: Measures) -> None:
        if m.parts.replicas:
            from distsim.runtime.report import runtime_rows

            m.instances = runtime_rows(m.instances, m.parts.replicas)

    def report(self, m: Measures) -> dict[str, Any] | None:
        """Per type; with a measurement window, its measured requests and the batches ending in its span."""
        if "type" not in m.table:
            return None
        from distsim.runtime.report import types_summary

        span_s = m.summary["_derived"]["span_s"]
        window = m.parts.features.get("window")
        if window is None:
            return types_summary(m.table, m.parts.replicas, span_s)
        from distsim.metrics.window import take_rows

        rows = take_rows(m.table, m.table["measured"])
        return types_summary(rows, m.parts.replicas, span_s, ended_in=(window.probe.window.start_us, m.stop_us))
