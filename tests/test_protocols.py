"""The declared interfaces (distsim.protocols): every kind of world the run builds (a cluster, a fleet of
cells, the typed front over a cluster) carries every member of World, and every replica (an LLM engine, a
batching runtime's replica) every member of Replica, so the run, the metrics and the timeline never probe.
What only some runs have is its feature's (distsim.feature), which the world builder attaches."""

from __future__ import annotations

import typing

import pytest

from distsim import load_config
from distsim.cells.fleet import Fleet
from distsim.cluster.cluster import Cluster
from distsim.events.loop import EventLoop
from distsim.protocols import Replica, RunSource, SignalSource, World
from distsim.resolve import resolve
from distsim.runtime.front import TypedFront
from distsim.world import build as build_parts

SMALL = ["workload.num_requests=4", "cluster.instances=4"]


def build(overrides: list[str]):
    """The world simulate.run builds for ``overrides`` (the typed front when runtime pools are configured),
    with its features (distsim.feature.Parts)."""
    scenario = resolve(load_config(overrides))
    return build_parts(scenario, EventLoop(scenario.sim.horizon_us))


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
    parts = build(overrides)
    world = parts.world
    assert type(world) is cls
    assert isinstance(world, World)
    for member in members(World):
        getattr(world, member)  # a property that reads through must not fail either
    for inst in world.instances:
        assert isinstance(inst, Replica) and isinstance(inst, SignalSource) and isinstance(inst, RunSource)
    for replica in parts.replicas:
        assert isinstance(replica, Replica) and isinstance(replica, SignalSource)
    assert ("cells" in parts.features) == (cls is Fleet)
    assert ("autoscale" in parts.features) == (name == "autoscaled")
    assert "hedging" not in parts.features and "kv_transfer" not in parts.features


def test_the_world_keeps_what_every_run_has() -> None:
    """The world's face is small: what only some runs have is a feature's, not a member of World."""
    assert len(members(World)) <= 10
    for name in ("runtimes", "cells", "hedgers", "autoscaler", "transfers", "board", "dp"):
        assert name not in members(World)


def test_the_front_forwards_only_what_world_names() -> None:
    """TypedFront offers the cluster's face member by member: nothing else of the cluster reads through."""
    front = build(WORLDS["typed front"][0]).world
    assert "__getattr__" not in vars(TypedFront)
    assert front.instances is front.cluster.instances and front.listeners is front.cluster.listeners
    assert len(front.runtimes) > 0
    assert not [name for name, value in vars(TypedFront).items() if isinstance(value, property)]  # no read-through
    with pytest.raises(AttributeError):
        front.admission  # noqa: B018 - the cluster's own, not the world's
