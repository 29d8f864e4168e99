"""Prefix groups and multi-turn sessions: the block keys carry the sharing they describe."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from distsim.workload import build_workload
from distsim.workload.keys import GROUP_BASE, UNIQUE_BASE, group_keys
from distsim.workload.traces.reuse import block_reuse

BS = 16


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


PREFIX = {
    "num_requests": 40_000,
    "input_tokens": {"dist": "uniform", "low": 1, "high": 300},
    "prefix": {"groups": 4, "group_tokens": [100, 512, 1000, 33], "share": 0.6, "zipf_s": 1.0},
}


def test_prefix_share_popularity_and_keys():
    reqs = list(build_workload(PREFIX, seed=11, block_size=BS))
    n = len(reqs)
    lengths = [100, 512, 1000, 33]
    with_prefix = [r for r in reqs if r.block_hashes is not None]
    assert abs(len(with_prefix) / n - 0.6) < 4 * math.sqrt(0.6 * 0.4 / n)
    groups = Counter()
    for r in with_prefix:
        g = (r.block_hashes[0] - GROUP_BASE) >> 32  # group keys are GROUP_BASE + g * 2**32 + i
        full = lengths[g] // BS
        assert r.block_hashes[:full] == group_keys(g, full)
        assert all(k >= UNIQUE_BASE for k in r.block_hashes[full:])
        assert len(r.block_hashes) == r.prompt_tokens // BS
        assert lengths[g] + 1 <= r.prompt_tokens <= lengths[g] + 300
        groups[g] += 1
    w = 1 / np.arange(1, 5)
    p = w / w.sum()
    m = len(with_prefix)
    for g in range(4):
        assert abs(groups[g] / m - p[g]) < 4 * math.sqrt(p[g] * (1 - p[g]) / m)


def test_two_requests_of_one_group_share_exactly_its_full_blocks():
    reqs = [r for r in build_workload(PREFIX, seed=12, block_size=BS) if r.block_hashes]
    by_first: dict = {}
    for r in reqs[:2000]:
        by_first.setdefault(r.block_hashes[0] if r.block_hashes else None, []).append(r)
    for group in by_first.values():
        for a, b in zip(group, group[1:], strict=False):
            shared = common_prefix(a.block_hashes, b.block_hashes)
            assert shared in {100 // BS, 512 // BS, 1000 // BS, 33 // BS}


def test_requests_without_groups_have_no_keys_and_reuse_matches():
    cfg = {"num_requests": 5000, "prefix": {"groups": 1, "tokens": 320, "share": 1.0}}
    reqs = list(build_workload(cfg, seed=1, block_size=BS))
    assert all(r.prompt_tokens == 320 + 512 for r in reqs)
    reuse = block_reuse(reqs, BS)
    assert reuse.reused_tokens == (len(reqs) - 1) * 320


SESSIONS = {
    "num_requests": 20_000,
    "arrival": {"rate_rps": 2.0},
    "input_tokens": {"dist": "uniform", "low": 20, "high": 200},
    "output_tokens": {"dist": "uniform", "low": 5, "high": 300},
    "prefix": {"groups": 2, "tokens": 64, "share": 0.5},
    "sessions": {
        "enabled": True,
        "turns": {"dist": "uniform", "low": 2, "high": 5},
        "think_time_s": {"dist": "exponential", "mean": 5.0},
        "max_context_tokens": 3000,
    },
}


def test_sessions_extend_the_previous_turn():
    reqs = list(build_workload(SESSIONS, seed=21, block_size=BS))
    assert [r.request_id for r in reqs] == list(range(len(reqs)))
    assert all(a.arrival_us <= b.arrival_us for a, b in zip(reqs, reqs[1:], strict=False))
    last = {}
    turns = Counter()
    gaps = []
    for r in reqs:
        assert r.prompt_tokens <= 3000
        assert len(r.block_hashes) == r.prompt_tokens // BS
        prev = last.get(r.session_id)
        if prev is not None:
            new = r.prompt_tokens - prev.prompt_tokens - prev.output_tokens
            assert 20 <= new <= 200
            assert r.block_hashes[: len(prev.block_hashes)] == prev.block_hashes
            assert (r.tenant, r.slo_class) == (prev.tenant, prev.slo_class)
            gaps.append((r.arrival_us - prev.arrival_us) / 1e6)
        last[r.session_id] = r
        turns[r.session_id] += 1
    assert max(turns.values()) <= 5
    gaps = np.array(gaps)
    assert abs(gaps.mean() - 5.0) < 4 * 5.0 / math.sqrt(len(gaps))
    # session ids are dense and start in arrival order
    firsts = {}
    for r in reqs:
        firsts.setdefault(r.session_id, r.request_id)
    ids = sorted(firsts, key=firsts.get)
    assert ids == sorted(ids)


def test_session_turn_counts_follow_their_distribution():
    cfg = dict(SESSIONS, num_requests=None, duration_s=3000.0)
    cfg["sessions"] = dict(SESSIONS["sessions"], max_context_tokens=None)
    reqs = list(build_workload(cfg, seed=3, block_size=BS))
    turns = Counter(r.session_id for r in reqs)
    first_arrival = {}
    for r in reqs:
        first_arrival.setdefault(r.session_id, r.arrival_us)
    complete = [turns[s] for s, t in first_arrival.items() if t < 2_000_000_000]
    # first turns before t=2000 s have 1000 s for at most 4 follow-ups of mean 5 s: all complete
    counts = Counter(complete)
    assert set(counts) <= {2, 3, 4, 5}
    n = len(complete)
    for k in (2, 3, 4, 5):
        assert abs(counts[k] / n - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)


def test_session_reuse_is_real():
    reqs = list(build_workload(dict(SESSIONS, prefix={"groups": 0}), seed=5, block_size=BS))
    reuse = block_reuse(reqs, BS)
    expected = 0
    last = {}
    for r in reqs:
        if r.session_id in last:
            expected += (last[r.session_id].prompt_tokens // BS) * BS
        last[r.session_id] = r
    assert reuse.reused_tokens == expected
