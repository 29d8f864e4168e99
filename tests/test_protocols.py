"""The declared interfaces (distsim.protocols): every kind of world the run builds (a cluster, a fleet of
cells, the typed front over a cluster) carries every member of World, and every replica (an LLM engine, a
batching runtime's replica) every member of Replica, so the run, the metrics and the timeline never probe."""

from __future__ import annotations

import typing

import pytest

from distsim import load_config
from distsim.cells.build import build_world
from distsim.cells.fleet import Fleet
from distsim.cluster.cluster import Cluster
from distsim.events.loop import EventLoop
from distsim.metrics.types import TypedRecorder
from distsim.protocols import Replica, RunSource, SignalSource, World
from distsim.resolve import resolve
from distsim.runtime.build import attach_runtimes
from distsim.runtime.front import TypedFront

SMALL = ["workload.num_requests=4", "cluster.instances=4"]


def build(overrides: list[str]) -> World:
    """The world simulate.run builds for ``overrides`` (the typed front when runtime pools are configured)."""
    scenario = resolve(load_config(overrides))
    loop = EventLoop(scenario.sim.horizon_us)
    recorder = TypedRecorder(scenario.slo.ttft_ms, scenario.slo.tpot_ms, scenario.frontend.output_lag_us)
    world = build_world(scenario.pools, scenario.policy, scenario.signals, scenario.transfer, loop, recorder,
                        seed=0, slo=scenario.slo, frontend=scenario.frontend, cells=scenario.cells)
    if scenario.runtimes:
        world = attach_runtimes(world, scenario.runtimes, scenario.policy, scenario.signals, loop, recorder, seed=0,
                                ttft_slo_ms=scenario.slo.ttft_ms)
    return world


def members(protocol: type) -> set[str]:
    """The names a protocol declares (its own and its bases'), as isinstance checks them."""
    return set(typing._get_protocol_attrs(protocol))  # type: ignore[attr-defined]


WORLDS = {
    "cluster": (SMALL, Cluster),
    "cells": ([*SMALL, "cluster.cells.count=2"], Fleet),
    "typed front": (["cluster=mixed_fleet", "workload=mixed_70_20_10", "workload.num_requests=4"], TypedFront),
    "autoscaled": ([*SMALL, "cluster.pools=[{name:a,count:1,autoscale:{kind:scheduled,min:1,max:2,schedule:[[1.0,2]]}}]"], Cluster),
}


@pytest.mark.parametrize("name", WORLDS)
def test_every_world_offers_every_member(name: str) -> None:
    overrides, cls = WORLDS[name]
    world = build(overrides)
    assert type(world) is cls
    assert isinstance(world, World)
    for member in members(World):
        getattr(world, member)  # a property that reads through must not fail either
    for inst in world.instances:
        assert isinstance(inst, Replica) and isinstance(inst, SignalSource) and isinstance(inst, RunSource)
    for replica in world.runtimes:
        assert isinstance(replica, Replica) and isinstance(replica, SignalSource)
    assert (world.cells is not None) == (cls is Fleet)
    assert (world.autoscaler is not None) == (name == "autoscaled")
    assert list(world.hedgers) == [] and world.transfers == 0


def test_the_front_forwards_only_what_world_names() -> None:
    """TypedFront offers the cluster's face member by member: nothing else of the cluster reads through."""
    front = build(WORLDS["typed front"][0])
    assert "__getattr__" not in vars(TypedFront)
    assert front.instances is front.cluster.instances and front.board is front.cluster.board
    assert len(front.runtimes) > 0
    with pytest.raises(AttributeError):
        front.admission  # noqa: B018 - the cluster's own, not the world's
