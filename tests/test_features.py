"""The features' registry (distsim.world.FEATURES) and interface (distsim.feature): each registered feature
loads as a Feature of its own name, a run imports only the features its config names, the summary's
sections follow the registry, and a feature added to the registry with its own settings attaches,
reports and checks itself without changing anything else of the run."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from distsim import load_config, simulate, world
from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts
from distsim.simulate import summary_json

SMALL = ["workload.num_requests=60"]


def test_every_registered_feature_loads_as_a_feature_of_its_name():
    names = [entry.name for entry in world.FEATURES]
    assert len(names) == len(set(names))
    for entry in world.FEATURES:
        cls = entry.load()
        assert issubclass(cls, Feature) and cls.name == entry.name


def test_a_run_imports_only_the_features_its_config_names():
    code = (
        "import sys; from distsim import load_config, simulate\n"
        "simulate(load_config(['workload.num_requests=5']))\n"
        "print(sorted(m for m in sys.modules if m.count('.') == 2 and m.endswith(('.feature', '.report'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["distsim.signals.feature"]  # noqa: S307 - our own printed list


def test_the_summary_sections_follow_the_registry():
    result = simulate(load_config([*SMALL, "policy=hedged", "cluster=mig_mixed", "sim.warmup_s=0.5"]))
    order = [entry.name for entry in world.FEATURES]
    sections = [key for key in result.summary if key in order]
    assert sections == sorted(sections, key=order.index)
    assert {"window", "mig", "signals", "hedging"} <= set(sections)


@dataclass(frozen=True)
class ToySettings:
    seed: int


def toy_settings(cfg) -> ToySettings | None:
    """On unless the seed is 7 (the toy's stand-in for a config node of its own)."""
    return None if cfg.seed == 7 else ToySettings(int(cfg.seed))


class ToyFeature(Feature):
    name = "toy"
    calls: list[str] = []

    @staticmethod
    def check(scenario) -> None:
        if scenario.features["toy"].seed == 3:
            raise ConfigError("seed", "the toy feature refuses seed 3")

    def prepare(self, parts: Parts) -> None:
        self.calls.append("prepare")

    def attach(self, parts: Parts) -> None:
        assert parts.world is not None and parts.clusters
        self.calls.append("attach")

    def report(self, m: Measures) -> dict:
        self.calls.append("report")
        return {"seed": m.parts.settings["toy"].seed, "instances": len(m.instances)}

    def outputs(self, m: Measures) -> dict:
        self.calls.append("outputs")
        return {}


@pytest.fixture
def toy(monkeypatch):
    entry = world.Entry("toy", "test_features:ToyFeature", settings="test_features:toy_settings")
    monkeypatch.setattr(world, "FEATURES", (*world.FEATURES, entry))
    ToyFeature.calls = []
    return ToyFeature


def test_a_feature_with_its_own_settings_reports_itself_and_changes_nothing_else(toy):
    base = simulate(load_config(SMALL))  # the registry holds the toy, but its settings are read at resolve
    assert toy.calls == ["prepare", "attach", "report", "outputs"]
    assert base.summary["toy"] == {"seed": 0, "instances": len(base.instances)}
    summary = dict(base.summary)
    del summary["toy"]
    toy.calls = []
    off = simulate(load_config([*SMALL, "seed=7"]))
    assert toy.calls == [] and "toy" not in off.summary
    again = simulate(load_config(SMALL))
    assert summary_json(again.summary) == summary_json(base.summary)
    assert again.requests.equals(base.requests) and again.instances.equals(base.instances)


def test_a_feature_refuses_what_it_cannot_compose_with_before_the_run(toy):
    with pytest.raises(ConfigError, match="refuses seed 3"):
        simulate(load_config([*SMALL, "seed=3"]))
    assert toy.calls == []  # nothing was built
