"""Resolve, then build: a bad value in any section stops before anything is built or simulated, and a
policy's own parameters come from its Params dataclass, not from a schema edit."""

from __future__ import annotations

import dataclasses

import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError, ConfigWarning
from distsim.events.loop import EventLoop
from distsim.resolve import Scenario, resolve

BIG = ["workload.num_requests=20000"]  # a bad value must not cost a simulation of these


@pytest.mark.parametrize(
    "override, key",
    [
        ("fitness.per=bogus", "fitness.per"),
        ("fitness.kind=bogus", "fitness.kind"),
        ("signals.refresh_interval_ms=-5", "signals.refresh_interval_ms"),
        ("signals.jitter_ms=10", "signals.jitter_ms"),
        ("cluster.kv_transfer.bandwidth_gbps=0", "cluster.kv_transfer.bandwidth_gbps"),
        ("cluster.instances=0", "cluster.instances"),
        ("cluster.engine.max_num_seqs=0", "cluster.engine.max_num_seqs"),
        ("workload.arrival.rate_rps=-1", "workload.arrival.rate_rps"),
        ("policy.routing.latency_ms=-1", "policy.routing.latency_ms"),
        ("sim.horizon_s=-1", "sim.horizon_s"),
        ("seed=-1", "seed"),
    ],
)
def test_a_bad_value_in_any_section_fails_before_the_first_event(monkeypatch, override, key):
    def no_events(self):
        raise AssertionError("the simulation started")

    monkeypatch.setattr(EventLoop, "run", no_events)
    with pytest.raises(ConfigError) as err:  # the event loop never runs: no clock needed to show it
        simulate(load_config([*BIG, override]))
    assert err.value.key == key


def test_the_weighted_fitness_is_checked_up_front():
    with pytest.raises(ConfigError, match="fitness.weights.bogus"):
        resolve(load_config(["fitness=weighted", "+fitness.weights.bogus=1"]))


def test_a_scenario_is_frozen_and_typed_in_microseconds():
    sc = resolve(load_config(["signals=stale_250ms", "policy.routing.latency_ms=1.5", "sim.horizon_s=2"]))
    assert isinstance(sc, Scenario)
    assert sc.signals.cadence["queue_depth"][0] == 250_000 and sc.policy.routing.latency_us == 1500
    assert sc.sim.horizon_us == 2_000_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.sim = None  # type: ignore[misc]


@pytest.mark.parametrize(
    "override, key",
    [
        ("policy=prefix_affinity policy.routing.load_guard=-1", "policy.routing.load_guard"),
        ("policy=cost_escalation policy.routing.half_life_ms=0", "policy.routing.half_life_ms"),
        ("policy=weighted policy.routing.scorers.queue_depth=-2", "policy.routing.scorers.queue_depth"),
        ("policy=token_bucket policy.admission.capacity_tokens=0", "policy.admission.capacity_tokens"),
        ("policy=queue_limit policy.admission.max_queued_requests=-3", "policy.admission.max_queued_requests"),
    ],
)
def test_a_policy_checks_its_own_parameters_before_anything_is_built(override, key):
    with pytest.raises(ConfigError) as err:
        resolve(load_config(override.split()))
    assert err.value.key == key


def test_every_policy_parameter_exists_in_the_composed_config_and_unused_ones_warn():
    cfg = load_config(["policy=round_robin"])
    assert {"load_guard", "half_life_ms", "prefix_index_blocks", "scorers"} <= set(cfg.policy.routing)
    assert {"capacity_tokens", "max_queued_requests", "slo_margin"} <= set(cfg.policy.admission)
    with pytest.warns(ConfigWarning, match="policy.routing.half_life_ms: is set, but the routing policy 'round_robin'"):
        resolve(load_config(["policy=round_robin", "policy.routing.half_life_ms=5"]))
