"""Each policy's defining behaviour, on a fake view or a small simulated cluster."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import engine, policy, run

from distsim.errors import ConfigError
from distsim.events.rng import stream
from distsim.instance.latency.linear import LinearLatency
from distsim.policies.base import ADMISSIONS, ROUTERS, PolicyContext
from distsim.request import Request
from distsim.signals.prefix_index import PrefixIndex


class FakeView:
    """A view with fixed signals, for unit tests of a policy's choice."""

    def __init__(self, n, queue=None, running=None, kv=None, outstanding=None, transit=None, index=None, now=0):
        self.n = n
        self._q = np.asarray(queue if queue is not None else [0] * n)
        self._r = np.asarray(running if running is not None else [0] * n)
        self._kv = np.asarray(kv if kv is not None else [0.0] * n, dtype=float)
        self._o = np.asarray(outstanding if outstanding is not None else [0] * n)
        self._t = np.asarray(transit if transit is not None else [0] * n)
        self._index = index
        self.now = now
        self.members = np.arange(n)

    def queue_depth(self):
        return self._q

    def running(self):
        return self._r

    def kv_utilization(self):
        return self._kv

    def outstanding(self):
        return self._o

    def in_transit(self):
        return self._t

    def queued_tokens(self):
        return self._q * 100

    def prefix_match(self, req):
        return self._index.match(req.block_hashes)


def router(kind, n, seed=0, **params):
    cls = ROUTERS.get(kind)
    typed = cls.Params(**params)
    typed.check("policy.routing")
    return cls(typed, PolicyContext(n, stream(seed, "router"), seed))


def req(i=0, hashes=None, session=-1, prompt=100):
    return Request(i, 0, prompt, 10, block_hashes=hashes, session_id=session)


def test_round_robin_cycles():
    sim = run([Request(i, i * 10, 8, 2) for i in range(7)], engine(), instances=3)
    assert sim.recorder.table()["instance"].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_random_draws_from_the_router_stream():
    a = [router("random", 5, seed=3).route(req(), FakeView(5)) for _ in range(1)]
    r1, r2 = router("random", 5, seed=3), router("random", 5, seed=3)
    seq1 = [r1.route(req(), FakeView(5)) for _ in range(50)]
    seq2 = [r2.route(req(), FakeView(5)) for _ in range(50)]
    assert seq1 == seq2 and len(set(seq1)) == 5 and a[0] == seq1[0]


def test_least_loaded_picks_the_minimum_of_queue_running_and_transit():
    view = FakeView(4, queue=[3, 0, 2, 0], running=[1, 5, 0, 2], transit=[0, 0, 1, 0])
    # loads 4, 5, 3, 2
    assert router("least_loaded", 4).route(req(), view) == 3


def test_least_kv_picks_the_emptiest_cache_and_breaks_ties_by_load():
    view = FakeView(3, kv=[0.5, 0.2, 0.2], queue=[0, 4, 1])
    assert router("least_kv", 3).route(req(), view) == 2


def test_power_of_two_takes_the_less_loaded_of_two_draws_from_the_router_stream():
    view = FakeView(6, queue=[5, 4, 3, 2, 1, 0])
    r = router("power_of_two", 6, seed=11)
    rng = stream(11, "router")
    for _ in range(30):
        a, b = rng.choice(6, size=2, replace=False)
        expected = int(b) if view.queue_depth()[b] < view.queue_depth()[a] else int(a)
        assert r.route(req(), view) == expected


def test_session_affinity_sticks_and_moves_when_overloaded():
    r = router("session_affinity", 3, load_guard=2)
    first = r.route(req(session=7), FakeView(3, outstanding=[1, 0, 1]))
    assert first == 1
    # sticks while its instance is within the guard of the least loaded
    assert r.route(req(session=7), FakeView(3, outstanding=[1, 2, 1])) == 1
    assert r.route(req(session=7), FakeView(3, outstanding=[1, 3, 1])) == 1
    # moves (and sticks to the new home) once it is more than the guard above
    moved = r.route(req(session=7), FakeView(3, outstanding=[0, 4, 1]))
    assert moved == 0
    assert r.route(req(session=7), FakeView(3, outstanding=[2, 0, 1])) == 0


def test_prefix_affinity_keeps_a_prefix_on_one_instance_until_the_guard_trips():
    index = PrefixIndex(3, [1000] * 3)
    r = router("prefix_affinity", 3, load_guard=3)
    hashes = tuple(range(20))
    outstanding = np.zeros(3, dtype=int)
    choices = []
    for i in range(10):
        view = FakeView(3, outstanding=outstanding.copy(), index=index)
        c = r.route(req(i, hashes), view)
        index.record(c, hashes)
        outstanding[c] += 1  # nobody finishes: load builds up on the warm instance
        choices.append(c)
    warm = choices[0]
    # the warm instance keeps the prefix while it is within 3 of the least loaded ...
    assert choices[:4] == [warm] * 4
    # ... then the guard sends the next one elsewhere, which becomes warm too
    assert choices[4] != warm
    assert len(set(choices)) == 3


def test_prefix_index_matches_longest_prefixes_and_evicts_lru():
    index = PrefixIndex(3, [4, 100, 100])
    index.record(0, (1, 2, 3))
    index.record(1, (1, 2, 9))
    assert index.match((1, 2, 3, 4)).tolist() == [3, 2, 0]
    index.record(0, (5, 6))  # capacity 4: the oldest block (1) leaves instance 0's index
    assert index.match((1, 2, 3)).tolist() == [0, 2, 0]


def test_cost_escalation_decays_and_spreads():
    r = router("cost_escalation", 2, half_life_ms=1000.0)
    assert r.route(req(prompt=1000), FakeView(2, now=0)) in (0, 1)
    first = int(np.argmax(r.cost))
    # right away the other instance is cheaper
    assert r.route(req(prompt=10), FakeView(2, now=1)) == 1 - first
    # one half-life later the first instance's cost has halved
    before = r.cost[first]
    r.route(req(prompt=1), FakeView(2, now=1_000_001))
    assert r.cost[first] == pytest.approx(before * 0.5, rel=1e-6)


def test_weighted_normalises_weights_and_takes_the_argmax():
    index = PrefixIndex(3, [100] * 3)
    index.record(2, (1, 2, 3, 4))
    r = router("weighted", 3, scorers={"prefix_affinity": 1, "queue_depth": 1}, load_guard=100)
    view = FakeView(3, queue=[0, 0, 4], index=index)
    # instance 2: prefix 1.0, queue 0.0 -> 0.5; instances 0, 1: prefix 0, queue 1.0 -> 0.5; tie
    scores = None
    choice = r.route(req(hashes=(1, 2, 3, 4)), view)
    scores = r.last_scores
    assert np.allclose(scores, [0.5, 0.5, 0.5]) and choice in (0, 1, 2)
    view = FakeView(3, queue=[0, 0, 2], index=index)  # queue score of 2 drops to 0 only at the max
    r2 = router("weighted", 3, scorers={"prefix_affinity": 3, "queue_depth": 1}, load_guard=100)
    assert r2.route(req(hashes=(1, 2, 3, 4)), view) == 2


@pytest.mark.parametrize(
    "scorers, message",
    [({"nope": 1}, "known: "), ({"queue_depth": -1}, ">= 0"), ({"queue_depth": 0, "kv_utilization": 0}, "not all be zero")],
)
def test_weighted_rejects_bad_scorer_configs(scorers, message):
    with pytest.raises(ConfigError, match=message):
        router("weighted", 2, scorers=scorers)


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(ConfigError, match="least_loaded.*round_robin"):
        ROUTERS.get("nope")
    with pytest.raises(ConfigError, match="token_bucket"):
        ADMISSIONS.get("nope")


def test_token_bucket_admits_at_the_refill_rate():
    # 200 tokens per request, 100 requests/s offered = 20,000 tokens/s; refill 5,000 tokens/s
    reqs = [Request(i, i * 10_000, 200, 1) for i in range(2000)]
    pol = policy("round_robin", "token_bucket", a_capacity_tokens=2000.0, a_refill_tokens_per_s=5000.0)
    df = run(reqs, engine(max_num_batched_tokens=256, total_kv_blocks=500), policy_cfg=pol).recorder.table()
    admitted = (df["status"] != "rejected").sum()
    span_s = 2000 * 0.01
    # burst capacity plus the refill over the span, within one request
    assert abs(admitted * 200 - (2000 + 5000 * span_s)) <= 200


def test_queue_limit_sheds_load_and_reject_all_rejects_everything():
    reqs = [Request(i, i * 100, 400, 50) for i in range(300)]
    params = engine(max_num_seqs=2, max_num_batched_tokens=64, total_kv_blocks=2000)
    lat = LinearLatency(1000.0, 1.0, 10.0)
    df = run(reqs, params, lat, instances=2, policy_cfg=policy("least_loaded", "queue_limit", a_max_queued_requests=5)).recorder.table()
    assert 0 < (df["status"] == "rejected").sum() < 300
    assert df.loc[df.status == "completed", "queue_ms"].max() < run(
        [Request(i, i * 100, 400, 50) for i in range(300)], params, lat, instances=2, routing="least_loaded"
    ).recorder.table()["queue_ms"].max()
    df = run(reqs[:10], params, lat, policy_cfg=policy("round_robin", "reject_all")).recorder.table()
    assert (df["status"] == "rejected").all()


def test_slo_aware_admission_rejects_requests_that_would_miss_their_ttft():
    reqs = [Request(i, i * 1000, 2000, 5, ttft_slo_ms=60.0) for i in range(200)]
    params = engine(max_num_seqs=8, max_num_batched_tokens=512, block_size=16, total_kv_blocks=5000)
    lat = LinearLatency(2000.0, 10.0, 10.0)  # a full 512-token chunk takes 7.12 ms
    df = run(reqs, params, lat, policy_cfg=policy("least_loaded", "slo_aware", a_slo_margin=1.0)).recorder.table()
    done = df[df.status == "completed"]
    assert (df["status"] == "rejected").sum() > 0 and len(done) > 0
    base = run([Request(i, i * 1000, 2000, 5, ttft_slo_ms=60.0) for i in range(200)], params, lat, routing="least_loaded")
    assert done["ttft_ms"].mean() < base.recorder.table()["ttft_ms"].mean()


def test_priority_and_shortest_prompt_queues_order_the_waiting():
    from distsim.instance.queues import QUEUES

    q = QUEUES["priority"]()
    for i, prio in enumerate([0, 2, 1, 2]):
        r = Request(i, i, 10, 1, priority=prio)
        q.append(r)
    assert [q.popleft().request_id for _ in range(4)] == [1, 3, 2, 0]
    q = QUEUES["shortest_prompt"]()
    for i, p in enumerate([30, 10, 20]):
        q.append(Request(i, i, p, 1))
    back = Request(9, 9, 99, 1)
    q.appendleft(back)  # a preempted request goes first whatever its length
    assert [q.popleft().request_id for _ in range(4)] == [9, 1, 2, 0]


@pytest.mark.parametrize("n", [7, 100, 1000])
def test_prefix_index_match_equals_each_instance_walking_its_own_keys(n):
    """The tree walk (one vectorised unpack for all its runs) against the definition: each instance's
    match is the number of leading keys it holds."""
    import random

    rnd = random.Random(n)
    index = PrefixIndex(n, [300] * n)  # small capacities: evictions leave holes in prefixes
    for _ in range(2000):
        g, length = rnd.randrange(30), rnd.randrange(1, 40)
        index.record(rnd.randrange(n), tuple(range(g * 1000, g * 1000 + length)))
    held = [set(index.keys(i)) for i in range(n)]
    for _ in range(100):
        g, length = rnd.randrange(30), rnd.randrange(1, 60)
        keys = tuple(range(g * 1000, g * 1000 + length))
        want = [next((k for k, h in enumerate(keys) if h not in held[i]), length) for i in range(n)]
        assert index.match(keys).tolist() == want
