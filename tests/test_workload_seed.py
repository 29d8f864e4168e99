"""``workload.seed``: the requests derive from it instead of the master seed, so they stay the same while
``seed`` varies the simulation's own streams (BLIS's WorkloadSeed beside its SimSeed); null keeps today's."""

from __future__ import annotations

import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError

COLS = ["request_id", "arrival_ms", "input_tokens", "output_tokens", "tenant", "session_id"]
BASE = ["workload.num_requests=150", "policy=random"]


def requests(*overrides: str):
    return simulate(load_config([*BASE, *overrides])).requests


def test_a_fixed_workload_seed_holds_the_requests_while_the_simulation_seed_varies():
    a, b = requests("seed=1", "workload.seed=7"), requests("seed=2", "workload.seed=7")
    assert a[COLS].equals(b[COLS])
    assert (a["instance"] != b["instance"]).any()  # the random router's stream follows seed


def test_null_derives_the_requests_from_the_master_seed_as_before():
    assert requests("seed=7")[COLS].equals(requests("seed=3", "workload.seed=7")[COLS])
    assert not requests("seed=1")[COLS].equals(requests("seed=2")[COLS])


def test_every_workload_stream_follows_it_sessions_and_tenants_too():
    extra = ["workload.sessions.enabled=true", "workload.tenants.count=4"]
    a, b = requests("seed=1", "workload.seed=9", *extra), requests("seed=5", "workload.seed=9", *extra)
    assert a[COLS].equals(b[COLS])


@pytest.mark.parametrize("value", [-1, 1.5])
def test_a_bad_workload_seed_names_its_key(value):
    with pytest.raises(ConfigError) as err:
        requests(f"workload.seed={value}")
    assert err.value.key == "workload.seed"
