"""summary.json's ``instance_balance``: Jain's index and the coefficient of variation across the engines of
the requests each served, the tokens it computed and its time-weighted mean KV use."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.metrics.summary import jain_index, variation
from distsim.request import Request


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=50))
def test_jain_lies_between_one_over_n_and_one_and_cv_is_std_over_mean(xs):
    x = np.asarray(xs)
    j = jain_index(x)
    assert 1.0 / len(x) - 1e-9 <= j <= 1.0 + 1e-9
    if x.mean() > 0:
        assert variation(x) == pytest.approx(float(np.std(x) / np.mean(x)))
        # the two agree: J = 1 / (1 + CV^2)
        assert j == pytest.approx(1.0 / (1.0 + variation(x) ** 2), rel=1e-9)
    else:
        assert variation(x) == 0.0


def test_equal_loads_give_one_and_zero_and_one_loaded_engine_gives_one_over_n():
    assert jain_index(np.full(4, 3.0)) == 1.0 and variation(np.full(4, 3.0)) == 0.0
    assert jain_index(np.array([5.0, 0, 0, 0])) == pytest.approx(0.25)
    assert variation(np.array([5.0, 0, 0, 0])) == pytest.approx(np.sqrt(3.0))


def _balance(overrides):
    return simulate(load_config(["workload.num_requests=120", *overrides]))


def test_round_robin_serves_equal_requests_and_the_figures_match_instances_parquet():
    result = _balance([])
    balance, inst = result.summary["instance_balance"], result.instances
    assert set(balance) == {"requests", "tokens", "kv_utilization"}
    assert balance["requests"] == {"jain": 1.0, "cv": 0.0}  # 120 requests, 4 instances, in turn
    tokens = (inst["prefill_tokens"] + inst["decode_tokens"]).to_numpy()
    assert balance["tokens"]["jain"] == round(jain_index(tokens), 4)
    assert balance["kv_utilization"]["cv"] == round(variation(inst["kv_utilization_mean"].to_numpy()), 4)


def test_a_router_that_sends_everything_to_one_instance_is_as_unfair_as_can_be():
    """Always the busiest (the highest outstanding count wins): a burst at t=0 all lands where the first went."""
    cfg = load_config(["policy=expression", "policy.routing.expression=outstanding"])
    result = simulate(cfg, [Request(i, 0, 200, 20) for i in range(40)])
    served = np.sort(result.instances["completed"].to_numpy())
    assert served.tolist() == [0, 0, 0, 40]
    balance = result.summary["instance_balance"]
    assert balance["requests"] == {"jain": 0.25, "cv": round(np.sqrt(3.0), 4)}
    assert balance["tokens"]["jain"] == 0.25
