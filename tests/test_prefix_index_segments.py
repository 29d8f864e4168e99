"""The router's prefix index by segments (distsim/signals/prefix_index.py) against the per-key reference
(tests/prefixref.py, the index as it was): random traces of shared prefixes, sessions that extend earlier
prompts, divergence inside runs, capacities of a few keys (so eviction is frequent and takes parts of
runs), instances forgotten, stride 1 and more, several instances. After every operation both give the same
match for every prompt, and every instance holds the same keys in the same LRU order; the tree's masks
agree with the runs, and nothing nobody holds is left without children."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prefixref import PrefixIndex as RefIndex
from test_kv_segments import make_prompts

from distsim.signals.prefix_index import PrefixIndex


def audit(index: PrefixIndex) -> None:
    """The tree against the runs: each node's mask is the set of instances whose runs cover it and its
    ``heads`` the runs that start at it; run sizes add up; the tree's node count is right; no node without
    owners and children is left."""
    covered: dict[int, int] = {}  # node -> the instances whose runs cover it
    heads: dict[int, int] = {}  # node -> the runs that start at it
    for i in range(index.n):
        total = 0
        lru = index._lru[i]
        run = lru.next
        while run is not lru:
            assert index._starts[i][run.key] is run
            node = run.end
            while node.depth > run.start:
                assert node.depth - node.n >= run.start, "a run starts inside a node"
                covered[id(node)] = covered.get(id(node), 0) | (1 << i)
                top, node = node, node.parent
            heads[id(top)] = heads.get(id(top), 0) + 1
            total += run.end.depth - run.start
            run = run.next
        assert total == index.size[i] <= index.capacity[i]
        assert len(index._starts[i]) == _count_runs(index, i)
    count = 0
    stack = list(index.tree.root.children.values())
    while stack:
        node = stack.pop()
        count += 1
        assert node.mask == covered.get(id(node), 0) and node.heads == heads.get(id(node), 0)
        assert node.mask or node.children, "a node nobody holds, without children"
        assert node.parent.depth == node.depth - node.n
        stack.extend(node.children.values())
    assert count == index.tree.nodes


def _count_runs(index: PrefixIndex, i: int) -> int:
    lru, run, n = index._lru[i], index._lru[i].next, 0
    while run is not lru:
        n, run = n + 1, run.next
    return n


class Pair:
    """Both indexes driven by the same operations."""

    def __init__(self, n: int, capacities: list[int], stride: int, probes: list[tuple]):
        self.new, self.ref = PrefixIndex(n, capacities, stride), RefIndex(n, capacities, stride)
        self.probes = probes

    def record(self, instance: int, hashes: tuple) -> None:
        self.new.record(instance, hashes)
        self.ref.record(instance, hashes)
        self.check()

    def forget(self, instance: int) -> None:
        self.new.forget(instance)
        self.ref.forget(instance)
        self.check()

    def check(self) -> None:
        for i in range(self.new.n):
            assert self.new.keys(i) == list(self.ref.lru[i])
        for p in self.probes:
            assert self.new.match(p).tolist() == self.ref.match(p).tolist()
        audit(self.new)


def run_trace(n: int, caps: list[int], stride: int, prompts: list[tuple], ops: list[tuple[int, int, int]]):
    probes = prompts + [p[: len(p) // 2] for p in prompts]
    pair = Pair(n, [c * stride for c in caps], stride, probes)
    for op, a, b in ops:
        if op == 0:
            pair.forget(a % n)
        else:
            pair.record(a % n, prompts[b % len(prompts)])
    return pair


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    caps=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    stride=st.sampled_from([1, 1, 2, 3]),
    tokens=st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=12), min_size=1, max_size=8),
    sessions=st.lists(st.integers(0, 20), min_size=8, max_size=8),
    ops=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 50), st.integers(0, 50)), max_size=60),
)
def test_segments_match_the_per_key_reference(caps, stride, tokens, sessions, ops):
    run_trace(len(caps), caps, stride, make_prompts(tokens, sessions), ops)


@pytest.mark.parametrize("n", [3, 70])
def test_long_random_traces(n):
    """Longer traces than hypothesis draws: more prompts, longer sessions, bits past one machine word."""
    for seed in range(12):
        rng = random.Random(seed * 100 + n)
        tokens = [[rng.randrange(3) for _ in range(rng.randrange(16))] for _ in range(16)]
        sessions = [rng.randrange(30) for _ in range(16)]
        caps = [rng.randrange(1, 40) for _ in range(n)]
        ops = [(rng.randrange(40), rng.randrange(n), rng.randrange(16)) for _ in range(300)]
        run_trace(n, caps, rng.choice([1, 2, 4]), make_prompts(tokens, sessions), ops)


def test_eviction_takes_heads_and_leaves_unmatchable_tails_held():
    """Recording moves a prompt's keys head first to the newest end, so eviction takes a run's head:
    the tail stays held (and counted) though no match can reach it, as in the per-key index."""
    p = tuple(range(10))
    pair = Pair(2, [6, 100], 1, [p, p[:3], (0, 1, 2, 99)])
    pair.record(0, p)  # six keys fit: 0-3 go, 4-9 stay on a node below a hole
    assert pair.new.match(p).tolist() == [0, 0] and pair.new.keys(0) == list(range(4, 10))
    pair.record(1, p[:3])
    pair.record(0, p[:2])  # two keys back at the newest end, the two oldest (4, 5) go
    assert pair.new.keys(0) == [6, 7, 8, 9, 0, 1]
    assert pair.new.match(p).tolist() == [2, 3]
    pair.forget(0)
    pair.forget(1)
    assert pair.new.tree.nodes == 0 and not pair.new.tree.root.children


def test_a_split_left_by_eviction_heals_once_the_holders_agree_again():
    """Instance 0 evicts the head of a prompt instance 1 holds whole: the prompt splits there. Once 0 is
    forgotten and 1 records the prompt again, both parts have the same holders and no run starts between
    them: they merge back into one node."""
    p = tuple(range(10))
    pair = Pair(2, [6, 100], 1, [p])
    pair.record(1, p)
    pair.record(0, p)  # 0 keeps 4-9: the prompt splits at 4
    assert pair.new.tree.nodes == 2
    pair.forget(0)
    assert pair.new.tree.nodes == 2  # 1's run still ends below the split, but nobody's starts there
    pair.record(1, p)
    assert pair.new.tree.nodes == 1 and pair.new.keys(1) == list(p)


class Counted(RefIndex):
    """The per-key reference in whole simulations, counting what it was asked to do."""

    made = evicted = forgotten = 0

    def __init__(self, *args):
        super().__init__(*args)
        Counted.made += 1

    def record(self, instance, hashes):
        before = len(self.lru[instance]) + len(hashes) // self.stride
        super().record(instance, hashes)
        Counted.evicted += max(0, before - len(self.lru[instance]))

    def forget(self, instance):
        super().forget(instance)
        Counted.forgotten += 1


AUTOSCALE = [  # 4 replicas, 6 from 5 s, 2 from 15 s (four leave: the index forgets them), 5 from 25 s
    "cluster.autoscale.kind=scheduled", "cluster.autoscale.max=6", "cluster.autoscale.interval_s=1",
    "cluster.autoscale.schedule=[[5,6],[15,2],[25,5]]", "cluster.autoscale.provision_s=1",
    "cluster.autoscale.cooldown_s=0",
]
SIMS = {  # the default workload: 80% of prompts open with one of 400 shared 2,048-token prompts
    "prefix_affinity, a small index": ["policy=prefix_affinity", "workload.num_requests=600",
                                       "policy.routing.prefix_index_blocks=600"],
    "weighted": ["policy=weighted", "workload.num_requests=600"],
    "weighted, autoscaled": ["policy=weighted", "workload.num_requests=900",
                             "policy.routing.prefix_index_blocks=900", *AUTOSCALE],
}


@pytest.mark.parametrize("overrides", SIMS.values(), ids=SIMS.keys())
def test_whole_runs_equal_the_per_key_index(overrides, monkeypatch):
    """Whole simulations with the index by segments and with the per-key one give the same tables."""
    import distsim.cluster.build as build_module
    from distsim import load_config, simulate

    seg = simulate(load_config(overrides))
    monkeypatch.setattr(build_module, "PrefixIndex", Counted)
    made, evicted, forgotten = Counted.made, Counted.evicted, Counted.forgotten
    ref = simulate(load_config(overrides))
    assert Counted.made > made
    assert seg.summary == ref.summary
    assert seg.requests.equals(ref.requests) and seg.instances.equals(ref.instances)
    if "prefix_index_blocks" in " ".join(overrides):
        assert Counted.evicted > evicted, "the index evicts nothing: pick a smaller one"
    if "cluster.autoscale.kind" in " ".join(overrides):
        assert Counted.forgotten > forgotten, "no replica left: the index never forgot one"
