"""summary.json's distributions: mean, min, p50, p75, p90, p95, p99 and max, in that order, for every latency
(and the weighted inter-token one), each percentile numpy's (or the inverted CDF for weights)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.metrics.summary import distribution, weighted_distribution

KEYS = ["mean", "min", "p50", "p75", "p90", "p95", "p99", "max"]
values = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(values)
def test_a_distribution_has_min_and_p75_in_order_and_as_numpy_computes_them(xs):
    d = distribution(np.asarray(xs))
    assert list(d) == KEYS
    assert d["min"] == round(min(xs), 4)
    assert d["p75"] == round(float(np.percentile(xs, 75)), 4)
    ordered = [d[k] for k in KEYS if k != "mean"]
    assert ordered == sorted(ordered)


@settings(max_examples=60, deadline=None)
@given(values, st.data())
def test_the_weighted_distribution_is_the_repeated_samples_inverted_cdf(xs, data):
    weights = data.draw(st.lists(st.integers(0, 5), min_size=len(xs), max_size=len(xs)))
    d = weighted_distribution(np.asarray(xs), np.asarray(weights))
    assert list(d) == KEYS
    repeated = np.repeat(np.asarray(xs), weights)
    if repeated.size == 0:
        assert all(v is None for v in d.values())
        return
    assert d["min"] == round(float(repeated.min()), 4)
    assert d["p75"] == round(float(np.percentile(repeated, 75, method="inverted_cdf")), 4)


def test_an_empty_distribution_names_every_key_with_null():
    assert distribution(np.array([])) == dict.fromkeys(KEYS)


def test_every_latency_in_summary_json_reports_min_and_p75():
    result = simulate(load_config(["workload.num_requests=120"]))
    s = result.summary
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        assert list(s[key]) == KEYS, key
    done = result.requests[result.requests["status"] == "completed"]
    assert s["ttft_ms"]["min"] == round(float(done["ttft_ms"].min()), 4)
    assert s["e2e_ms"]["p75"] == round(float(np.percentile(done["e2e_ms"], 75)), 4)
    for cls in s["slo_classes"].values():
        assert list(cls["ttft_ms"]) == KEYS
