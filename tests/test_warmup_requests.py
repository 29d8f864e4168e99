"""``sim.warmup_requests``: warm-up by request count. The first N requests by arrival do not count; the
window opens at the arrival of request N, so rates and fleet figures start there as under ``sim.warmup_s``."""

from __future__ import annotations

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.metrics.summary import distribution
from tests.clikit import assert_user_error, run_module

BASE = ["workload.num_requests=200"]


def run(*overrides: str):
    return simulate(load_config([*BASE, *overrides]))


def test_the_first_n_requests_by_arrival_are_excluded_and_the_rest_counted():
    plain, warm = run(), run("sim.warmup_requests=50")
    assert warm.summary["requests"]["arrived"] == 150
    window = warm.summary["window"]
    assert (window["measured"], window["excluded_before"], window["warmup_requests"]) == (150, 50, 50)
    # the simulation is the same run: the same requests, times and instances
    cols = ["request_id", "arrival_ms", "instance", "first_token_ms", "completion_ms"]
    assert plain.requests[cols].equals(warm.requests[cols])
    rows = plain.requests.sort_values(["arrival_ms", "request_id"], kind="stable").iloc[50:]
    assert warm.requests["measured"].tolist() == plain.requests["request_id"].isin(rows["request_id"]).tolist()
    assert window["start_ms"] == rows["arrival_ms"].iloc[0]
    assert warm.summary["ttft_ms"] == distribution(rows["ttft_ms"].to_numpy())


def test_it_agrees_with_a_time_warmup_that_starts_at_the_same_arrival():
    warm = run("sim.warmup_requests=50")
    start_s = warm.summary["window"]["start_ms"] / 1000.0
    timed = run(f"sim.warmup_s={start_s}")
    for key in ("requests", "ttft_ms", "e2e_ms", "throughput", "gpu_utilization", "itl_ms"):
        assert warm.summary[key] == timed.summary[key], key


def test_a_window_length_and_drain_run_from_the_first_counted_arrival():
    warm = run("sim.warmup_requests=50", "sim.measure_s=5", "sim.drain_s=2")
    window = warm.summary["window"]
    assert window["end_ms"] == pytest.approx(window["start_ms"] + 5000.0)
    arrivals = warm.requests["arrival_ms"]
    measured = warm.requests["measured"]
    assert (arrivals[measured] < window["end_ms"]).all() and measured.sum() == window["measured"]
    assert warm.summary["sim"]["simulated_s"] <= (window["end_ms"] + 2000.0) / 1000.0


def test_capacity_counts_the_same_requests_after_the_warmup():
    result = run("sim.warmup_requests=50", "fitness=capacity", "workload.num_requests=120")
    assert result.summary["capacity"]["runs"] >= 2
    assert np.isfinite(result.summary["fitness"])


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["sim.warmup_requests=-1"], "integer >= 0"),
        (["sim.warmup_requests=10", "sim.warmup_s=1"], "not both"),
        (["sim.warmup_requests=200"], "none would count"),
        (["sim.warmup_requests=5", "workload.clients.count=4"], "sim.warmup_s"),
    ],
)
def test_bad_values_name_the_key(overrides, needle):
    with pytest.raises(ConfigError) as err:
        run(*overrides)
    assert err.value.key == "sim.warmup_requests" and needle in err.value.message, str(err.value)


def test_a_bad_value_on_the_command_line_is_one_line_and_status_2(tmp_path):
    proc = run_module("distsim", "sim.warmup_requests=-3", "workload.num_requests=20", f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, "sim.warmup_requests", "integer >= 0")
