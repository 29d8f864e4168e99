"""The all-reduce model (distsim/instance/latency/allreduce.py) against the public profiles its terms are
fitted on (scripts/allreduce_fit.py): within the stated error of their points, monotone in message size
on each path, growing with the TP degree, on the path vLLM picks; a bad value is one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clikit import assert_user_error, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.instance.latency import allreduce as ar

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
NET = SHARED / "vidur_h100_profiles" / "network"
MIB = 1024 * 1024
LINK, HOST = 450.0, 64.0
EFF, TWO = ar.CUSTOM_LINK_EFFICIENCY, ar.CUSTOM_TWO_SHOT_US


def _fit_script():
    spec = importlib.util.spec_from_file_location("allreduce_fit", ROOT / "scripts" / "allreduce_fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def custom(nbytes: float, tp: int, latency: float = ar.CUSTOM_PROFILE_FIXED_US) -> float:
    return ar.all_reduce_us(nbytes, tp, LINK, True, True, True, latency, HOST, EFF, TWO)


def test_the_custom_all_reduce_is_within_13_percent_of_every_profiled_point():
    d = pd.read_csv(ROOT / "docs" / "data" / "vllm_custom_allreduce_h100.csv", comment="#")
    pred = np.array([custom(s, int(n)) for n, s in zip(d["world_size"], d["bytes"])])
    err = np.abs(pred - d["latency_us"].to_numpy()) / d["latency_us"].to_numpy()
    # the profile was timed outside a CUDA graph: its fixed time stands in for the in-graph latency here
    assert err.mean() < 0.05 and err.max() < 0.13
    for n in (2, 4, 8):
        assert err[d["world_size"].to_numpy() == n].mean() < 0.05


def test_the_shipped_terms_are_the_fit_scripts_output():
    fit = _fit_script().custom_fit()
    assert (fit["fixed_us_outside_graph"], fit["two_shot_us"]) == (ar.CUSTOM_PROFILE_FIXED_US, ar.CUSTOM_TWO_SHOT_US)
    assert fit["peer_gbps"] == ar.CUSTOM_PEER_GBPS
    committed = json.loads((ROOT / "docs" / "data" / "allreduce_fit.json").read_text(encoding="utf-8"))
    assert committed["custom_all_reduce"] == json.loads(json.dumps(fit))
    ring = committed["nccl_ring_nvlink"]
    assert (ring["fixed_us"], ring["per_step_us"], round(ring["bus_gbps"] / ar.H100_LINK_GBPS, 4)) == ar.NCCL_RING
    pcie = committed["nccl_pcie"]
    assert (pcie["fixed_us"], pcie["algbw_gbps"] / 64.0) == ar.NCCL_PCIE


@pytest.mark.skipif(not NET.is_dir(), reason="needs ../shared/data (Vidur's network profiles)")
def test_nccls_ring_is_within_17_percent_of_vidurs_dgx_profile_from_8_to_64_mib():
    d = pd.read_csv(NET / "h100_dgx_all_reduce.csv")
    d = d[(d["size"] >= 8 * MIB) & (d["size"] <= 64 * MIB)]
    pred = np.array([ar.all_reduce_us(s, int(n), LINK, True, True, False, 0.0, HOST) for n, s in zip(d["num_workers"], d["size"])])
    y = d["time_stats.all_reduce.median"].to_numpy() * 1e3
    err = np.abs(pred - y) / y
    assert err.mean() < 0.05 and err.max() < 0.17
    assert json.loads(json.dumps(_fit_script().nccl_ring_fit(NET / "h100_dgx_all_reduce.csv"))) == json.loads(
        (ROOT / "docs" / "data" / "allreduce_fit.json").read_text(encoding="utf-8")
    )["nccl_ring_nvlink"]


def test_each_message_takes_vllms_path():
    assert ar.path(MIB, 2, True, True, True) == "custom_one_shot"  # two GPUs: always one-shot
    assert ar.path(511 * 1024, 4, True, True, True) == "custom_one_shot"
    assert ar.path(512 * 1024, 4, True, True, True) == "custom_two_shot"
    assert ar.path(255 * 1024, 8, True, True, True) == "custom_one_shot"
    assert ar.path(256 * 1024, 8, True, True, True) == "custom_two_shot"
    assert ar.path(8 * MIB, 4, True, True, True) == "nccl_ring"  # at and above vLLM's 8 MiB buffer
    assert ar.path(MIB, 3, True, True, True) == "nccl_ring"  # a world size the kernel lacks
    assert ar.path(MIB, 4, True, True, False) == "nccl_ring"  # custom all-reduce off
    assert ar.path(MIB, 2, False, True, True) == "custom_one_shot"  # two PCIe GPUs with P2P
    assert ar.path(MIB, 4, False, True, True) == "nccl_pcie"  # more than two: only fully NVLink-connected
    assert ar.path(MIB, 2, False, False, True) == "nccl_host"  # no P2P: through host memory


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tp=st.sampled_from([2, 3, 4, 6, 8]),
    nvlink=st.booleans(), p2p=st.booleans(), use_custom=st.booleans(),
    a=st.integers(1, 64 * MIB), b=st.integers(1, 64 * MIB),
)
def test_the_time_grows_with_the_message_on_each_path(tp, nvlink, p2p, use_custom, a, b):
    small, large = sorted((a, b))
    way = ar.path(small, tp, nvlink, p2p, use_custom)
    if way != ar.path(large, tp, nvlink, p2p, use_custom):
        return  # a path switch may drop: vLLM switches to the path its authors measured faster
    t = [ar.all_reduce_us(s, tp, LINK if nvlink else 64.0, nvlink, p2p, use_custom, 1.0, HOST, EFF, TWO) for s in (small, large)]
    assert 0 < t[0] <= t[1]


def test_the_time_grows_with_the_tp_degree():
    for nbytes in (16 * 1024, 128 * 1024):  # a decode's message: one-shot at 2, 4 and 8 GPUs
        times = [custom(nbytes, tp, 1.0) for tp in (2, 4, 8)]
        assert times == sorted(times) and times[0] < times[-1]
        # one-shot: the peers' bytes grow as tp - 1
        assert (times[2] - 1.0) / (times[0] - 1.0) == pytest.approx(7.0)
    ring = [ar.all_reduce_us(32 * MIB, tp, LINK, True, True, True, 1.0, HOST) for tp in (2, 3, 4, 6, 8)]
    assert ring == sorted(ring)
    assert ar.all_reduce_us(MIB, 1, LINK, True, True, True, 1.0, HOST) == 0.0


def test_the_two_shot_barrier_is_a_coefficient_that_slows_a_tp4_run():
    base = ["workload.num_requests=20", "cluster.engine.tensor_parallel_size=4", "cluster.instances=1"]
    runs = [simulate(load_config([*base, f"cluster.latency.all_reduce_two_shot_us={v}"])) for v in (0.0, 50.0)]
    assert [r.summary["requests"]["completed"] for r in runs] == [20, 20]
    assert runs[1].summary["e2e_ms"]["mean"] > runs[0].summary["e2e_ms"]["mean"]


@pytest.mark.parametrize("value", ["-1", "nan", "true"])
def test_a_bad_two_shot_time_is_one_line_naming_the_key(value):
    with pytest.raises(ConfigError, match="cluster.latency.all_reduce_two_shot_us"):
        simulate(load_config(["workload.num_requests=5", f"cluster.latency.all_reduce_two_shot_us={value}"]))


def test_a_bad_two_shot_time_on_the_command_line_exits_2():
    proc = run_module("distsim", "workload.num_requests=5", "cluster.latency.all_reduce_two_shot_us=-3")
    assert_user_error(proc, 2, "cluster.latency.all_reduce_two_shot_us")
