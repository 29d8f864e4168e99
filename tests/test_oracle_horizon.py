"""The oracle's shadow horizon: a shadow that ends before it changes nothing, one cut at it costs at most the
horizon's steps however long the outputs, its times past the horizon follow the work left, and a bad
horizon is one ConfigError naming the key."""

from __future__ import annotations

import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.policies.oracle import shadow

MODEL = LinearLatency(1000.0, 100.0, 200.0)


class Counting(LinearLatency):
    """The linear model, counting the step-time calls a shadow makes."""

    calls = 0

    def step_us(self, shape):
        Counting.calls += 1
        return super().step_us(shape)

    def decode_steps_us(self, decode_seqs, decode_ctx0, count):
        Counting.calls += 1
        return super().decode_steps_us(decode_seqs, decode_ctx0, count)


def test_a_horizon_the_work_ends_before_changes_nothing():
    jobs = [(0, 50, 300), (0, 200, 100), (400, 30, 0), (2000, 80, 0), (64, 500, 0)]
    full = shadow(jobs, MODEL, 512, 3)
    assert shadow(jobs, MODEL, 512, 3, horizon_us=max(full[1])) == full
    assert shadow(jobs, MODEL, 512, 3, horizon_us=10**12) == full


def test_a_cut_shadow_costs_the_horizons_steps_not_the_outputs():
    """400 requests of 5,000 output tokens on an engine of 64 sequences: without a horizon every finish is a
    step-time call; with 2 s of horizon, the calls of 2 s of steps."""
    jobs = [(0, 5000 + 7 * i, 2000) for i in range(64)] + [(2000, 5000 + 11 * i, 0) for i in range(336)]
    model = Counting(1000.0, 100.0, 200.0)
    Counting.calls = 0
    full = shadow(jobs, model, 2048, 64)
    unbounded = Counting.calls
    Counting.calls = 0
    cut = shadow(jobs, model, 2048, 64, horizon_us=2_000_000)
    assert unbounded >= 400 and Counting.calls <= 5
    # past the horizon: in the order the work is served, and never before the horizon's step
    first, done = cut
    assert all(d >= 2_000_000 for d in done)
    assert first[64:] == sorted(first[64:])
    assert abs(sum(done) - sum(full[1])) / sum(full[1]) < 0.25  # the closed form is an estimate


@pytest.mark.parametrize("value", [0, -1])
def test_a_bad_oracle_horizon_names_the_key(value):
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["policy=oracle", f"policy.routing.horizon_s={value}", "workload.num_requests=20"]))
    assert err.value.key == "policy.routing.horizon_s"
