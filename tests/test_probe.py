"""The probe API (distsim.probe): each phase is told once, in order, with the run's own objects, and a run
with a probe gives the same summary as one without."""

from __future__ import annotations

from distsim import load_config, simulate
from distsim.probe import RunProbe
from distsim.simulate import summary_json

OVERRIDES = ["workload.num_requests=200", "cluster.instances=2"]


class Phases(RunProbe):
    def __init__(self):
        self.seen: list[tuple] = []

    def built(self, world, loop, recorder):
        self.seen.append(("built", loop.events, len(recorder), world.instances is not None))

    def ran(self, world, loop, recorder):
        self.seen.append(("ran", loop.events, len(recorder)))

    def measured(self, result):
        self.seen.append(("measured", result.summary["sim"]["events"]))


def test_each_phase_is_told_once_in_order_and_the_run_is_the_same():
    probe = Phases()
    cfg = load_config(OVERRIDES)
    result = simulate(cfg, probe=probe)
    events = result.summary["sim"]["events"]
    assert probe.seen == [("built", 0, 0, True), ("ran", events, 200), ("measured", events)]
    assert summary_json(simulate(load_config(OVERRIDES)).summary) == summary_json(result.summary)


def test_the_default_probe_does_nothing():
    result = simulate(load_config(OVERRIDES), probe=RunProbe())
    assert result.summary["requests"]["completed"] == 200
