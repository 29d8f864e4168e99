"""The timeline's feature: engines that tell their steps (distsim.instance.observed.ObservedInstance),
the timeline listening to the world, and timeline.json's trace at the end."""

from __future__ import annotations

from typing import Any

from distsim.feature import Feature, Measures, Parts
from distsim.timeline.trace import Timeline


class TimelineFeature(Feature):
    name = "timeline"

    def __init__(self) -> None:
        self.timeline: Timeline | None = None

    def prepare(self, parts: Parts) -> None:
        from distsim.instance.observed import ObservedInstance

        parts.instance_cls = ObservedInstance
        self.timeline = Timeline(parts.sim.timeline)

    def attach(self, parts: Parts) -> None:
        assert self.timeline is not None
        self.timeline.attach(parts)

    def outputs(self, m: Measures) -> dict[str, Any]:
        assert self.timeline is not None
        return {"timeline_trace": self.timeline.trace(m.parts, m.table, m.end_us, m.parts.seed)}
