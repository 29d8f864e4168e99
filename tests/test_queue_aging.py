"""Aging of the ordered waiting queues (cluster.engine.scheduler_aging_per_s): a long prompt or a low class
waits at most a bounded time behind later arrivals, and no aging is the order as before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import engine, run

from distsim import load_config
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.instance.queues import QUEUES
from distsim.request import Request
from distsim.resolve import resolve


def _drain(q) -> list[int]:
    return [q.popleft().request_id for _ in range(len(q))]


def test_shortest_prompt_with_aging_serves_an_old_long_prompt_before_newer_short_ones():
    # 1,000 tokens at t=0, then 10-token prompts every second; aging 100 tokens/s: the long prompt's key is
    # 1000, a short one arriving at t s has 10 + 100 t, so arrivals from t >= 9.9 s queue behind it
    q = QUEUES["shortest_prompt"](100.0)
    q.append(Request(0, 0, 1000, 1))
    for i in range(1, 15):
        q.append(Request(i, i * 1_000_000, 10, 1))
    order = _drain(q)
    assert order.index(0) == 9  # after the nine shorts of t = 1..9 s, before t = 10 s's
    plain = QUEUES["shortest_prompt"]()
    plain.append(Request(0, 0, 1000, 1))
    for i in range(1, 15):
        plain.append(Request(i, i * 1_000_000, 10, 1))
    assert _drain(plain)[-1] == 0  # without aging it starves behind every shorter prompt


def test_priority_with_aging_promotes_one_level_per_inverse_rate():
    q = QUEUES["priority"](0.5)  # one level per 2 s waited
    q.append(Request(0, 0, 10, 1, priority=0))
    q.append(Request(1, 1_000_000, 10, 1, priority=1))  # key 0.5 - 1 = -0.5: ahead of request 0 (key 0)
    q.append(Request(2, 3_000_000, 10, 1, priority=1))  # key 1.5 - 1 = 0.5: behind request 0
    assert _drain(q) == [1, 0, 2]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 4000), st.integers(0, 2)), min_size=1, max_size=30),
       st.sampled_from(["priority", "shortest_prompt"]))  # fmt: skip
def test_zero_aging_is_the_order_without_aging(items, kind):
    a, b = QUEUES[kind](), QUEUES[kind](0.0)
    for i, (t, p, prio) in enumerate(items):
        a.append(Request(i, t, p, 1, priority=prio))
        b.append(Request(i, t, p, 1, priority=prio))
    assert _drain(a) == _drain(b)


def test_aging_in_a_run_bounds_the_longest_wait():
    # a 600-token prompt among 40-token ones arriving faster than the engine drains them: without aging it
    # waits behind every shorter prompt (818 ms here); aged at 20,000 tokens/s, its 560 extra tokens are
    # worth 28 ms of waiting, after which later short prompts queue behind it
    def reqs():
        return [Request(i, i * 1500, 600 if i == 5 else 40, 4) for i in range(400)]

    lat = LinearLatency(1000.0, 1.0, 10.0)
    params = dict(max_num_seqs=2, max_num_batched_tokens=64, total_kv_blocks=2000, scheduler="shortest_prompt")
    wait = {}
    for aging in (0.0, 20_000.0):
        table = run(reqs(), engine(**params, scheduler_aging_per_s=aging), lat).recorder.table().set_index("request_id")
        assert (table["status"] == "completed").all()
        wait[aging] = float(table.loc[5, "queue_ms"])
    assert wait[0.0] > 500.0
    assert wait[20_000.0] < 100.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["cluster.engine.scheduler_aging_per_s=5"], "fcfs needs 0"),
        (["cluster.engine.scheduler=priority", "cluster.engine.scheduler_aging_per_s=-1"], "finite number >= 0"),
    ],
)
def test_bad_aging_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=r"cluster.engine.scheduler_aging_per_s.*" + message):
        resolve(load_config(overrides))
