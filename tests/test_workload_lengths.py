"""Length distributions, clamps, tenants and SLO classes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from distsim.events.rng import stream
from distsim.workload import build_workload
from distsim.workload.lengths import Sampler
from distsim.workload.schema import WorkloadConfig
from distsim.workload.source import as_config

VIDUR = "tests/fixtures/traces/vidur_arxiv_head300.csv"


def sampler(**kw) -> Sampler:
    default = WorkloadConfig().input_tokens  # the schema's: its value 512 stays beside another dist's keys, unread
    return Sampler(as_config({"input_tokens": kw}).input_tokens, "workload.input_tokens", default=default)


def draw(n=100_000, seed=5, **kw) -> np.ndarray:
    return sampler(**kw).sample(stream(seed, "test"), n)


def lognormal_moments(mu, sigma):
    mean = math.exp(mu + sigma**2 / 2)
    return mean, mean * math.sqrt(math.exp(sigma**2) - 1)


@pytest.mark.parametrize(
    "kw, mean, std",
    [
        ({"dist": "lognormal", "mu": 5.0, "sigma": 0.5}, *lognormal_moments(5.0, 0.5)),
        ({"dist": "exponential", "mean": 200.0}, 200.0, 200.0),
        ({"dist": "uniform", "low": 10, "high": 90}, 50.0, math.sqrt((81**2 - 1) / 12)),
        ({"dist": "normal", "mean": 500.0, "std": 100.0}, 500.0, 100.0),
    ],
)
def test_length_means(kw, mean, std):
    x = draw(**kw)
    assert x.dtype == np.int64 and x.min() >= 1
    assert abs(x.mean() - mean) < 4 * std / math.sqrt(len(x)) + 0.01


def test_fixed_and_uniform_bounds():
    assert (draw(1000, dist="fixed", value=77) == 77).all()
    x = draw(50_000, dist="uniform", low=3, high=5)
    assert set(np.unique(x)) == {3, 4, 5}


def test_clamps_respected():
    x = draw(dist="lognormal", mu=5.0, sigma=1.5, min=100, max=200)
    assert x.min() == 100 and x.max() == 200
    y = draw(dist="exponential", mean=0.1)  # lengths never go below 1
    assert y.min() == 1


def test_normal_is_truncated_not_piled_on_bounds():
    x = draw(dist="normal", mean=100.0, std=50.0, min=90, max=400)
    assert x.min() >= 90 and x.max() <= 400
    assert (x == 90).mean() < 0.02  # clamping would put ~42% of the mass on 90


def test_empirical_from_csv_column():
    col = pd.read_csv(VIDUR)["num_decode_tokens"].to_numpy(float)
    x = draw(dist="empirical", path=VIDUR, column="num_decode_tokens")
    assert set(np.unique(x)) <= set(np.rint(col).astype(int))
    assert abs(x.mean() - col.mean()) < 4 * col.std() / math.sqrt(len(x))


def test_think_times_are_floats():
    s = Sampler(as_config({}).sessions.think_time_s, "workload.sessions.think_time_s", integer=False)
    x = s.sample(stream(0, "t"), 100_000)
    assert x.dtype == np.float64
    assert abs(x.mean() - 10.0) < 4 * 10.0 / math.sqrt(len(x))


def test_zipf_tenant_shares():
    n, count, s = 100_000, 5, 1.2
    reqs = list(build_workload({"num_requests": n, "tenants": {"count": count, "zipf_s": s}}, seed=9))
    counts = np.bincount([r.tenant for r in reqs], minlength=count)
    w = np.arange(1, count + 1) ** -s
    p = w / w.sum()
    se = np.sqrt(p * (1 - p) / n)
    assert (np.abs(counts / n - p) < 4 * se).all()


def test_explicit_tenant_shares():
    reqs = list(
        build_workload({"num_requests": 40_000, "tenants": {"count": 3, "shares": [1, 0, 3]}}, seed=1)
    )
    counts = np.bincount([r.tenant for r in reqs], minlength=3)
    assert counts[1] == 0
    assert abs(counts[2] / 40_000 - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 40_000)


MULTI = {
    "num_requests": 60_000,
    "input_tokens": {"dist": "fixed", "value": 100},
    "output_tokens": {"dist": "fixed", "value": 10},
    "tenants": {
        "count": 3,
        "zipf_s": 0.0,
        "profiles": [
            {"slo_class": "gold", "ttft_ms": 111.0},
            {"priority": 7, "input_tokens": {"dist": "fixed", "value": 300}},
        ],
    },
    "slo": {
        "ttft_ms": 2000.0,
        "tpot_ms": 100.0,
        "classes": [
            {"name": "gold", "share": 1.0, "ttft_ms": 500.0, "tpot_ms": 20.0, "priority": 2},
            {"name": "bulk", "share": 3.0, "output_tokens": {"dist": "fixed", "value": 50}},
        ],
    },
}


def test_classes_and_tenant_profiles_resolve_in_order():
    reqs = list(build_workload(MULTI, seed=4))
    by = {}
    for r in reqs:
        by.setdefault((r.tenant, r.slo_class), set()).add(
            (r.ttft_slo_ms, r.tpot_slo_ms, r.priority, r.prompt_tokens, r.output_tokens)
        )
    # tenant 0: always gold; its own TTFT wins over the class's
    assert {k[1] for k in by if k[0] == 0} == {"gold"}
    assert by[(0, "gold")] == {(111.0, 20.0, 2, 100, 10)}
    # tenant 1: priority and input length of its own, the rest from the class
    assert by[(1, "gold")] == {(500.0, 20.0, 7, 300, 10)}
    assert by[(1, "bulk")] == {(2000.0, 100.0, 7, 300, 50)}
    # tenant 2: no profile
    assert by[(2, "gold")] == {(500.0, 20.0, 2, 100, 10)}
    assert by[(2, "bulk")] == {(2000.0, 100.0, 0, 100, 50)}
    # class shares among tenants without a fixed class: 1 : 3
    free = [r for r in reqs if r.tenant != 0]
    gold = sum(r.slo_class == "gold" for r in free) / len(free)
    assert abs(gold - 0.25) < 4 * math.sqrt(0.25 * 0.75 / len(free))


def test_default_slo_filled_in():
    r = next(iter(build_workload({"num_requests": 1}, seed=0)))
    assert (r.slo_class, r.ttft_slo_ms, r.tpot_slo_ms, r.priority, r.tenant) == (
        "default",
        2000.0,
        100.0,
        0,
        0,
    )
