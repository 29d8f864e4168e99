"""Queued-token admission (token_limit): sheds by the prompt tokens waiting, and never a protected tier."""

from __future__ import annotations

import pytest
from simkit import engine, policy, run

from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request

LAT = LinearLatency(1000.0, 1.0, 10.0)
PARAMS = dict(max_num_seqs=2, max_num_batched_tokens=64, total_kv_blocks=4000)


def _reqs() -> list[Request]:
    # an overload: a 400-token prompt every 100 us, every third one of the high class (priority 1)
    return [Request(i, i * 100, 400, 20, priority=1 if i % 3 == 0 else 0) for i in range(300)]


def test_token_limit_sheds_and_bounds_the_queue():
    df = run(_reqs(), engine(**PARAMS), LAT, instances=2,
             policy_cfg=policy("least_loaded", "token_limit", a_max_queued_tokens=2000)).recorder.table()  # fmt: skip
    base = run(_reqs(), engine(**PARAMS), LAT, instances=2, routing="least_loaded").recorder.table()
    assert 0 < (df["status"] == "rejected").sum() < len(df)
    assert df.loc[df.status == "completed", "queue_ms"].max() < base["queue_ms"].max()


def test_a_protected_tier_is_never_rejected():
    df = run(_reqs(), engine(**PARAMS), LAT, instances=2, policy_cfg=policy(
        "least_loaded", "token_limit", a_max_queued_tokens=2000, a_protected_priority=1)).recorder.table()  # fmt: skip
    high = df["request_id"] % 3 == 0
    assert (df.loc[high, "status"] != "rejected").all()
    assert (df.loc[~high, "status"] == "rejected").any()


def test_token_limit_needs_its_limit():
    with pytest.raises(ConfigError, match="policy.admission.max_queued_tokens"):
        policy("least_loaded", "token_limit")
