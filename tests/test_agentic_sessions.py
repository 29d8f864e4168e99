"""Closed-loop sessions (workload.sessions.closed_loop): a turn never starts before its previous reply,
the context grows as chat templates resend it, tool calls wait for their slowest call and bring their
results, the per-session figures, determinism and bad values."""

from __future__ import annotations

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.simulate import summary_json

BASE = ["workload=sessions", "workload.num_requests=400", "workload.sessions.closed_loop=true",
        "cluster.instances=2", "policy=session_affinity"]


def run(*overrides: str):
    return simulate(load_config([*BASE, *overrides]))


def turns(df):
    """Per session, its turns in order: (previous row, next row) pairs."""
    df = df.sort_values(["session_id", "turn"])
    same = df["session_id"].to_numpy()[1:] == df["session_id"].to_numpy()[:-1]
    prev, nxt = df.iloc[:-1][same], df.iloc[1:][same]
    assert (nxt["turn"].to_numpy() == prev["turn"].to_numpy() + 1).all()
    return prev, nxt


def test_a_turn_never_starts_before_its_previous_reply():
    df = run("workload.sessions.think_time_s.dist=fixed", "workload.sessions.think_time_s.value=2",
             "workload.sessions.think_time_s.mean=null").requests
    prev, nxt = turns(df)
    assert len(nxt) > 200
    gap = nxt["arrival_ms"].to_numpy() - prev["completion_ms"].to_numpy()
    assert (gap >= 0).all()
    assert np.allclose(gap, 2000.0, atol=0.0011)  # exactly the think time after the reply (microsecond rounding)


def test_the_context_grows_by_the_answer_and_the_new_message():
    df = run().requests
    prev, nxt = turns(df)
    new = nxt["input_tokens"].to_numpy() - prev["input_tokens"].to_numpy() - prev["output_tokens"].to_numpy()
    assert (new >= 50).all() and (new <= 400).all()  # workload=sessions' new user tokens: 50..400


def test_tool_calls_wait_for_the_slowest_call_and_bring_their_results():
    r = run("workload.sessions.tools.share=0.6", "workload.sessions.tools.calls.dist=uniform",
            "workload.sessions.tools.calls.low=1", "workload.sessions.tools.calls.high=4",
            "workload.sessions.tools.latency_s.dist=fixed", "workload.sessions.tools.latency_s.value=0.75",
            "workload.sessions.tools.result_tokens.value=120")
    prev, nxt = turns(r.requests)
    calls = nxt["tool_calls"].to_numpy()
    tool = calls > 0
    assert 0.45 < tool.mean() < 0.75 and set(calls[tool]) == {1, 2, 3, 4}
    gap = nxt["arrival_ms"].to_numpy() - prev["completion_ms"].to_numpy()
    assert np.allclose(gap[tool], 750.0, atol=0.0011)  # parallel calls: the slowest, not the sum
    new = nxt["input_tokens"].to_numpy() - prev["input_tokens"].to_numpy() - prev["output_tokens"].to_numpy()
    assert (new[tool] == 120 * calls[tool]).all()  # each call's result joins the prompt
    assert r.summary["sessions"]["tool_calls"] == int(r.requests["tool_calls"].sum())
    assert (r.requests.loc[r.requests["turn"] == 0, "tool_calls"] == 0).all()


def test_per_session_figures():
    r = run("workload.num_requests=2000", "workload.duration_s=60")
    s, df = r.summary["sessions"], r.requests
    assert 0 < s["finished"] <= s["started"] == df["session_id"].nunique()
    assert s["turns"]["max"] <= 8 and s["turns"]["p50"] >= 2  # workload=sessions: 2 to 8 turns
    span = df.groupby("session_id").apply(lambda g: (g["completion_ms"].max() - g["arrival_ms"].min()) / 1000.0,
                                          include_groups=False)
    assert s["session_s"]["max"] <= span.max() + 1e-3
    assert s["follow_up_cache_hit_rate"] > 0.5  # each turn resends the history the cache still holds
    assert df.loc[df["turn"] > 0, "cached_tokens"].sum() > 0


def test_same_seed_same_bytes():
    args = ("workload.sessions.tools.share=0.3", "workload.sessions.tools.calls.value=2")
    a, b = run(*args), run(*args)
    assert summary_json(a.summary) == summary_json(b.summary)
    assert a.requests.equals(b.requests)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("workload.sessions.tools.share=1.5", "workload.sessions.tools.share"),
        ("workload.sessions.tools.result_tokens.dist=lognormal", "workload.sessions.tools.result_tokens.mu"),
        ("workload.sessions.tools.latency_s.dist=nope", "workload.sessions.tools.latency_s.dist"),
        ("workload.mix={llm: 0.5, vision: 0.5}", "workload.sessions.closed_loop"),
    ],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        run("workload.sessions.tools.share=0.5", override)
    assert err.value.key == key


def test_the_capacity_fitness_is_refused():
    with pytest.raises(ConfigError) as err:
        run("fitness.kind=capacity")
    assert err.value.key == "fitness.kind" and "workload.sessions.closed_loop" in str(err.value)
