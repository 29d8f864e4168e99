"""``cluster.kv_transfer.compression``: the share of a prompt's KV bytes that crosses the P/D link (the LLM
Inference Simulator's compression factor); 1 sends them as computed."""

from __future__ import annotations

import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError
from tests.clikit import assert_user_error, run_module

PD = ["cluster=pd_disagg", "workload.num_requests=80"]


def transfer(*overrides: str) -> dict:
    return simulate(load_config([*PD, *overrides])).summary["kv_transfer"]


def test_the_bytes_and_the_time_past_the_latency_scale_with_the_factor():
    full = transfer("cluster.kv_transfer.latency_us=0")
    for factor in (0.5, 0.125):
        part = transfer("cluster.kv_transfer.latency_us=0", f"cluster.kv_transfer.compression={factor}")
        assert part["transfers"] == full["transfers"]
        assert part["gb"] == pytest.approx(full["gb"] * factor, rel=1e-5)
        assert part["mean_ms"] == pytest.approx(full["mean_ms"] * factor, abs=1e-3)  # whole microseconds each


def test_one_is_today():
    assert simulate(load_config(PD)).summary == simulate(load_config([*PD, "cluster.kv_transfer.compression=1.0"])).summary


def test_a_smaller_transfer_shortens_ttft():
    slow = simulate(load_config([*PD, "cluster.kv_transfer.bandwidth_gbps=1"])).summary["ttft_ms"]["mean"]
    fast = simulate(load_config([*PD, "cluster.kv_transfer.bandwidth_gbps=1", "cluster.kv_transfer.compression=0.25"]))
    assert fast.summary["ttft_ms"]["mean"] < slow


@pytest.mark.parametrize(("value", "needle"), [(0, "> 0"), (-0.5, "> 0"), (1.5, "(0, 1]")])
def test_a_bad_factor_names_its_key(value, needle):
    with pytest.raises(ConfigError) as err:
        transfer(f"cluster.kv_transfer.compression={value}")
    assert err.value.key == "cluster.kv_transfer.compression" and needle in err.value.message


def test_a_bad_factor_on_the_command_line_is_one_line_and_status_2(tmp_path):
    proc = run_module("distsim", *PD, "cluster.kv_transfer.compression=2", f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, "cluster.kv_transfer.compression", "(0, 1]")
