"""The prefix cache by segments (distsim/instance/kv_cache.py) against the per-block reference
(tests/kvref.py, the cache as it was): random traces of shared prefixes, sessions that extend earlier
prompts, chunked registration with duplicates, preemptions and finishes, P/D-style holds released later,
CPU-tier loads (reference, allocate, register, release at once) and evictions under pressure. After every
operation both give the same prefix match for every prompt (hits and how many were evictable), the same
free, evictable and used counts and the same evictions."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvref import KVCache as RefCache

from distsim.instance.kv_cache import KVCache


def make_prompts(tokens: list[list[int]], sessions: list[int]) -> list[tuple]:
    """Prompts from token lists (a small alphabet, so prompts share prefixes and diverge inside runs);
    each key is the prefix up to its block, so equal keys mean equal prefixes (as distsim's keys)."""
    prompts: list[list[int]] = []
    for i, toks in enumerate(tokens):
        base = prompts[sessions[i] % len(prompts)] if prompts and sessions[i] % 3 == 0 else []
        prompts.append(base + toks)  # a session's next turn extends an earlier prompt
    return [tuple(tuple(p[: k + 1]) for k in range(len(p))) for p in prompts]


class Pair:
    """Both caches driven by the same operations, one request state for each."""

    def __init__(self, total: int, prompts: list[tuple]):
        self.new, self.ref = KVCache(total), RefCache(total)
        self.prompts = prompts
        self.active: dict[int, dict] = {}  # request slot -> its state
        self.held: list[dict] = []  # P/D: handed off, blocks kept until the transfer ends

    def check(self) -> None:
        new, ref = self.new, self.ref
        assert (new.free, new.available(), new.used(), new.evictions) == (
            ref.free,
            ref.available(),
            ref.used(),
            ref.evictions,
        )
        assert new.referenced == len(ref.refcount) and new.references == sum(ref.refcount.values())
        assert new.tally() == (new.referenced, new.evictable, new.references)
        for p in self.prompts:
            assert new.match_prefix(p, len(p)) == ref.match_prefix(p, len(p))

    def admit(self, slot: int, arg: int, whole: bool = False) -> None:
        if slot in self.active:
            return
        hashes = self.prompts[slot]
        limit = len(hashes) if whole else arg % (len(hashes) + 1)
        hits, fe = self.new.match_prefix(hashes, limit)
        assert (hits, fe) == self.ref.match_prefix(hashes, limit)
        need = len(hashes) - hits + (0 if whole else arg % 3)
        if need > self.new.available() - fe:
            return
        st_ = {"hashes": hashes, "hashed": hits, "private": need, "count": hits}
        st_["runs"] = self.new.reference(hashes, hits)
        st_["shared"] = list(hashes[:hits])
        self.ref.reference(st_["shared"])
        self.new.allocate(need)
        self.ref.allocate(need)
        self.active[slot] = st_

    def register(self, slot: int, arg: int, whole: bool = False) -> None:
        s = self.active.get(slot)
        if s is None:
            return
        lo = s["hashed"]
        hi = len(s["hashes"]) if whole else min(len(s["hashes"]), lo + 1 + arg % 4)
        if hi <= lo:
            return
        new = self.new.register(s["hashes"], lo, hi, s["runs"])
        assert new == self.ref.register(s["hashes"][lo:hi], s["shared"])
        s["private"] -= new
        s["count"] += new
        s["hashed"] = hi
        assert s["count"] == len(s["shared"]) == sum(s["runs"][1::2])

    def grow(self, slot: int, arg: int) -> None:
        s = self.active.get(slot)
        k = arg % 3
        if s is None or k > self.new.available():
            return
        self.new.allocate(k)
        self.ref.allocate(k)
        s["private"] += k

    def release(self, slot: int, hold: bool) -> None:
        s = self.active.pop(slot, None)
        if s is None:
            return
        if hold:
            self.held.append(s)
            return
        self.new.release(s["runs"], s["private"])
        self.ref.release(s["shared"], s["private"])

    def transfer_done(self, arg: int) -> None:
        if self.held:
            s = self.held.pop(arg % len(self.held))
            self.new.release(s["runs"], s["private"])
            self.ref.release(s["shared"], s["private"])

    def cpu_load(self, slot: int, arg: int) -> None:
        """A CPU-tier load: GPU hits referenced, the loaded blocks allocated, registered and all released."""
        if slot in self.active:
            return
        self.admit(slot, 0, whole=True)
        if slot not in self.active:
            return
        self.register(slot, 0, whole=True)
        self.release(slot, False)


OPS = ["admit", "register", "register", "grow", "release", "hold", "transfer_done", "cpu_load"]


def run_trace(total: int, prompts: list[tuple], ops: list[tuple[int, int, int]]) -> None:
    pair = Pair(total, prompts)
    for op, a, b in ops:
        slot = a % len(prompts)
        name = OPS[op % len(OPS)]
        if name == "release" or name == "hold":
            pair.release(slot, name == "hold")
        elif name == "transfer_done":
            pair.transfer_done(b)
        else:
            getattr(pair, name)(slot, b)
        pair.check()
    for s in list(pair.active):
        pair.release(s, False)
    while pair.held:
        pair.transfer_done(0)
    pair.check()
    assert pair.new.used() == 0 and pair.new.references == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    total=st.integers(4, 40),
    tokens=st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=9), min_size=1, max_size=8),
    sessions=st.lists(st.integers(0, 20), min_size=8, max_size=8),
    ops=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 50), st.integers(0, 50)), max_size=80),
)
def test_segments_match_per_block_reference(total, tokens, sessions, ops):
    run_trace(total, make_prompts(tokens, sessions), ops)


def test_long_random_traces():
    """Longer traces than hypothesis draws, under heavy eviction pressure."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        tokens = [[rng.randrange(3) for _ in range(rng.randrange(12))] for _ in range(12)]
        sessions = [rng.randrange(30) for _ in range(12)]
        ops = [(rng.randrange(8), rng.randrange(60), rng.randrange(60)) for _ in range(400)]
        run_trace(rng.randrange(6, 60), make_prompts(tokens, sessions), ops)


class PerBlock(RefCache):
    """The per-block reference behind the segment cache's interface, for whole simulations: a request's
    runs are ``[hash, 1, hash, 1, ...]`` (one block each), so the instance's checks read them alike."""

    made = 0

    def __init__(self, total_blocks: int):
        super().__init__(total_blocks)
        PerBlock.made += 1

    def reference(self, hashes, hits):
        super().reference(hashes[:hits])
        return [x for h in hashes[:hits] for x in (h, 1)]

    def register(self, hashes, lo, hi, held):
        shared: list = []
        new = super().register(hashes[lo:hi], shared)
        held.extend(x for h in shared for x in (h, 1))
        return new

    def release(self, held, private):
        super().release(held[::2], private)

    @property
    def referenced(self):
        return len(self.refcount)

    @property
    def references(self):
        return sum(self.refcount.values())

    def tally(self):
        return self.referenced, self.evictable, self.references


SMALL = ["workload.num_requests=300", "cluster.instances=2", "cluster.engine.max_model_len=10000"]
SIMS = {
    "shared prompts under pressure": [*SMALL, "cluster.engine.total_kv_blocks=1200"],
    "with a CPU tier": [*SMALL, "cluster.engine.total_kv_blocks=1200", "cluster.engine.cpu_kv_blocks=3000"],
    "sessions": ["workload=sessions", *SMALL, "cluster.engine.total_kv_blocks=800"],
    "P/D": ["cluster=pd_disagg", "workload=prefix_heavy", *SMALL[:1], *SMALL[2:], "cluster.engine.total_kv_blocks=1200"],
}


@pytest.mark.parametrize("overrides", SIMS.values(), ids=SIMS.keys())
def test_whole_runs_equal_the_per_block_cache(overrides, monkeypatch):
    """Whole simulations with the segment cache and with the per-block one give the same tables."""
    import distsim.instance.instance as instance_module
    from distsim import load_config, simulate

    seg = simulate(load_config(overrides))
    monkeypatch.setattr(instance_module, "KVCache", PerBlock)
    made = PerBlock.made
    ref = simulate(load_config(overrides))
    assert PerBlock.made > made
    assert seg.summary == ref.summary
    tables = [(_frame(seg.request_table), _frame(ref.request_table)), (_frame(seg.instance_table), _frame(ref.instance_table))]
    for a, b in tables:
        assert a.equals(b)
    assert tables[1][0]["kv_evictions"].sum() > 0, "the run evicts nothing: pick a smaller cache"
    assert tables[0][0]["cached_tokens"].sum() > 0


def _frame(table):
    return table if isinstance(table, pd.DataFrame) else table.to_pandas()


def test_duplicates_evicted_between_chunks_leave_a_hole_that_a_later_prompt_refills():
    """A request whose first chunk duplicated another's blocks registers its next chunk after part of
    those were evicted: the evicted run stays in the tree as a hole (no match goes past it) until a
    later request computes it again; all along both caches agree."""
    p = make_prompts([[0] * 5], [1])[0]
    q = make_prompts([[0] * 5 + [1] * 5], [1])[0]
    pair = Pair(16, [p, q])
    new, ref = pair.new, pair.ref

    def both(name, *args):
        getattr(new, name)(*args)
        getattr(ref, name)(*args)
        pair.check()

    a_runs, a_shared = new.reference(p, 0), []
    both("allocate", 5)
    assert new.register(p, 0, 5, a_runs) == ref.register(p[:5], a_shared) == 5
    r_runs, r_shared = [], []
    both("allocate", 10)
    assert new.register(q, 0, 5, r_runs) == ref.register(q[:5], r_shared) == 0  # duplicates: private
    new.release(a_runs, 0)
    ref.release(a_shared, 0)
    both("allocate", 3)  # one free block: evicts two, the tail of the first prompt's run
    assert new.register(q, 5, 10, r_runs) == ref.register(q[5:10], r_shared) == 5
    pair.check()
    assert new.match_prefix(q, 10) == (3, 3)  # the hole stops the match; the cached run below it waits
    new.release(r_runs, 5)
    ref.release(r_shared, 5)
    pair.check()
    hits, _ = new.match_prefix(q, 10)
    s_runs, s_shared = new.reference(q, hits), list(q[:hits])
    ref.reference(s_shared)
    both("allocate", 2)
    assert new.register(q, 3, 5, s_runs) == ref.register(q[3:5], s_shared) == 2  # the hole refilled
    pair.check()
    assert new.match_prefix(q, 10) == ref.match_prefix(q, 10) == (10, 5)
    new.release(s_runs, 0)
    ref.release(s_shared, 0)
    both("allocate", new.available())  # everything evicted, in the same order
    assert new.tally() == (0, 0, 0) and not new.root.children
