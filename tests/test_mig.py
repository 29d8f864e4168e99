"""MIG slices (distsim/catalog/mig.py, distsim/cluster/mig.py): the profile table, the packer's layouts
(never more than a GPU's compute and memory slices), a slice's hardware, KV capacity and step time by hand,
cost split by slice, the mig_penalty scorer, and every refusal as one ConfigError naming the key."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.catalog import load_hardware, load_model
from distsim.catalog.mig import load_mig_profile, mig_profiles, slice_hardware
from distsim.cluster.mig import MigSlices, pack, place_pools, price_per_hour, slice_columns
from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.build import build_latency_model
from distsim.policies.scorers.mig_penalty import MigPenaltyScorer
from distsim.request import Request
from distsim.resolve import resolve

GIB = 1024**3
H100, A100 = load_hardware("H100"), load_hardware("A100-80G")
SMALL = ["workload.num_requests=60", "workload.arrival.rate_rps=20"]


def test_the_profile_tables_are_the_user_guides():
    h = mig_profiles("H100")
    assert list(h) == ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [(p.compute_slices, p.memory_slices, p.copy_engines, p.max_instances) for p in h.values()] == [
        (1, 1, 1, 7), (1, 2, 1, 4), (2, 2, 2, 3), (3, 4, 3, 2), (4, 4, 4, 1), (7, 8, 8, 1)
    ]
    a = mig_profiles("A100-80G")
    assert [p.copy_engines for p in a.values()] == [1, 1, 2, 3, 4, 7]
    assert mig_profiles("L40S") == {}
    assert load_mig_profile(H100, "MIG 3g.40gb", "k").name == "3g.40gb"


def test_a_slice_is_the_gpu_scaled_by_its_fractions():
    p = load_mig_profile(H100, "3g.40gb", "k")
    hw = slice_hardware(H100, p)
    assert hw.bf16_tflops == pytest.approx(989 * 3 / 7)
    assert hw.fp8_tflops == pytest.approx(1979 * 3 / 7)
    assert hw.hbm_bw_tbps == pytest.approx(3.35 * 4 / 8)
    assert hw.memory_bytes == 40 * GIB
    assert hw.host_link_gbps_per_dir == pytest.approx(64 * 3 / 8)
    assert hw.gpus_per_node == 1 and hw.name == "H100"


PROFILES = [p for gpu in ("H100", "A100-80G") for p in mig_profiles(gpu).values()]


def _layouts(profiles, where):
    gpus: dict[int, list] = {}
    for p, (g, s) in zip(profiles, where):
        gpus.setdefault(g, []).append((p, s))
    return gpus


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(range(len(PROFILES))), min_size=1, max_size=60))
def test_slices_never_oversubscribe_their_gpu(indices):
    profiles = [PROFILES[i] for i in indices]
    gpus = _layouts(profiles, pack(profiles))
    assert sorted(gpus) == list(range(len(gpus)))  # GPUs numbered as opened, none empty
    for slices in gpus.values():
        assert len({p.gpu for p, _ in slices}) == 1  # one GPU type per GPU
        used = [0] * 8
        for p, s in slices:
            assert s in p.placements
            for m in range(s, s + p.memory_slices):
                used[m] += 1
        assert max(used) == 1 or not slices  # no memory slice taken twice
        assert sum(p.memory_slices for p, _ in slices) <= 8
        assert sum(p.compute_slices for p, _ in slices) <= 7
        assert sum(p.copy_engines for p, _ in slices) <= slices[0][0].gpu_copy_engines
        for name in {p.name for p, _ in slices}:
            p = next(q for q, _ in slices if q.name == name)
            assert sum(q.name == name for q, _ in slices) <= p.max_instances


@pytest.mark.parametrize("profile", list(mig_profiles("H100")))
@pytest.mark.parametrize("n", [1, 6, 7, 8, 15])
def test_one_profile_packs_max_instances_per_gpu(profile, n):
    p = mig_profiles("H100")[profile]
    where = pack([p] * n)
    assert len({g for g, _ in where}) == math.ceil(n / p.max_instances)


class _Pool:
    def __init__(self, name, profile, count, hw=H100):
        self.name, self.count, self.hardware = name, count, slice_hardware(hw, profile)
        self.mig = MigSlices(profile, hw.price_usd_per_gpu_hour)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(6)), st.integers(1, 9)), min_size=1, max_size=5))
def test_a_gpus_slices_are_billed_exactly_one_gpu(spec):
    pools = [_Pool(f"p{i}", list(mig_profiles("H100").values())[k], n) for i, (k, n) in enumerate(spec)]
    place_pools(pools)
    pool_of = [p for p in pools for _ in range(p.count)]
    cols = slice_columns(pool_of)
    per_gpu: dict[int, float] = {}
    for g, f in zip(cols["mig_gpu"], cols["gpu_fraction"]):
        per_gpu[g] = per_gpu.get(g, 0.0) + f
    assert all(v == pytest.approx(1.0) for v in per_gpu.values())
    assert sum(price_per_hour(pool_of)) == pytest.approx(len(per_gpu) * H100.price_usd_per_gpu_hour)


def test_seven_1g_slices_cost_one_gpu():
    pools = [_Pool("tiny", mig_profiles("H100")["1g.10gb"], 7)]
    place_pools(pools)
    cols = slice_columns(pools * 7)
    assert set(cols["mig_gpu"]) == {0}
    assert cols["gpu_fraction"] == pytest.approx([1 / 7] * 7)
    assert sum(cols["price_usd_per_gpu_hour"]) == pytest.approx(H100.price_usd_per_gpu_hour)


def test_four_1g20_slices_run_and_cost_one_gpu():
    cfg = load_config(["cluster.model=qwen2.5-7b", "cluster.instances=4", "cluster.mig.profile=1g.20gb", *SMALL])
    r = simulate(cfg)
    inst = r.instances
    assert list(inst["mig_profile"]) == ["1g.20gb"] * 4 and set(inst["mig_gpu"]) == {0}
    assert (inst["price_usd_per_gpu_hour"] * inst["gpus"]).sum() == pytest.approx(H100.price_usd_per_gpu_hour)
    assert r.summary["mig"]["gpus"] == 1 and r.summary["mig"]["instances_per_gpu"] == 4
    span_s = r.summary["sim"]["simulated_s"]
    assert r.summary["fitness"] == pytest.approx(r.summary["goodput"]["requests_per_s"] / 1.0, rel=1e-3)
    assert span_s > 0


def test_kv_capacity_and_step_time_follow_the_scaled_hardware():
    cfg = load_config(["cluster.instances=2", "cluster.mig.profile=3g.40gb", *SMALL])
    pool = resolve(cfg).pools[0]
    model = load_model("llama-3.1-8b")
    # by hand: 40 GiB x (0.9 - 0.05) minus the weights, in blocks of 16 tokens x 128 KiB
    usable = 40 * GIB * 0.9 - 40 * GIB * 0.05 - model.weight_bytes_per_gpu(1, 1)
    assert pool.engine.total_kv_blocks == math.floor(usable / (16 * 131072))
    by_hand = replace(H100, bf16_tflops=989 * 3 / 7, fp8_tflops=1979 * 3 / 7, hbm_bw_tbps=3.35 / 2, memory_bytes=40 * GIB,
                      host_link_gbps_per_dir=24.0, price_usd_per_gpu_hour=2.69 * 3 / 7, gpus_per_node=1)
    expected = build_latency_model(cfg.cluster.latency, LatencyContext(model, by_hand, 1))
    whole = build_latency_model(cfg.cluster.latency, LatencyContext(model, H100, 1))
    for shape in (StepShape(2048, 2048 * 2049 // 2, 2048, 0, 0, 1), StepShape(0, 0, 0, 64, 64 * 1500, 0)):
        assert pool.latency.step_us(shape) == expected.step_us(shape)
        assert pool.latency.step_us(shape) > whole.step_us(shape)  # less compute and bandwidth: slower


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["cluster.mig.profile=1g.10gb"], "cluster.mig.profile", "does not fit a H100 MIG 1g.10gb slice"),
        (["cluster.mig.profile=1g.20gb"], "cluster.mig.profile", "profiles that fit: 3g.40gb, 4g.40gb, 7g.80gb"),
        (["cluster.mig.profile=5g.50gb"], "cluster.mig.profile", "offers no MIG profile"),
        (["cluster.mig.profile=3g.40gb", "cluster.hardware=L40S"], "cluster.mig.profile", "has no MIG profiles"),
        (["cluster.mig.profile=7g.80gb", "cluster.engine.tensor_parallel_size=2"],
         "cluster.engine.tensor_parallel_size", "must be 1 on MIG slices"),
        (["cluster.mig.profile=3g.40gb", "cluster.engine.data_parallel_size=2"],
         "cluster.engine.data_parallel_size", "one engine per slice"),
        (["cluster.mig.profile=3g.40gb", "cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=4"],
         "cluster.mig.profile", "autoscaling"),
        (["cluster.mig.profile=3g.40gb", "cluster.cells.count=2"], "cluster.cells.count", "cells over MIG"),
        (["cluster=heterogeneous", "cluster.mig.profile=3g.40gb"], "cluster.mig.profile", "give each pool"),
        (["cluster=mig_mixed", "cluster.pools.1.mig.profile=1g.10gb"], "cluster.pools[1].mig.profile", "does not fit"),
    ],
)
def test_bad_input_is_one_config_error_naming_the_key(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        resolve(load_config([*overrides, *SMALL]))
    assert err.value.key == key and words in err.value.message


def test_a_short_max_model_len_lets_the_model_onto_a_small_slice():
    cfg = load_config(["cluster.mig.profile=1g.20gb", "cluster.engine.max_model_len=8192", *SMALL])
    assert resolve(cfg).pools[0].engine.total_kv_blocks * 16 >= 8192


def test_mixed_fleet_counts_gpu_fractions_not_slices():
    r = simulate(load_config(["cluster=mig_mixed", *SMALL]))
    inst = r.instances
    assert len(inst) == 12 and (inst["mig_profile"] == "3g.40gb").sum() == 8
    assert (inst["gpus"] * inst["gpu_fraction"]).sum() == pytest.approx(8.0)
    assert r.summary["mig"] == {
        "gpus": 8, "whole_gpus": 4, "sliced_gpus": 4, "instances_per_gpu": 1.5,
        "kv_tokens_per_gpu": r.summary["mig"]["kv_tokens_per_gpu"],
        "pools": {"sliced": {"profile": "3g.40gb", "slices": 8, "gpus": 8 * 0.5,
                             "kv_blocks_per_slice": int(inst["total_kv_blocks"].iloc[-1])}},
    }
    assert r.summary["fitness"] == pytest.approx(r.summary["goodput"]["requests_per_s"] / 8, rel=1e-3)


def test_without_mig_the_outputs_have_no_mig_columns():
    r = simulate(load_config(SMALL))
    assert "mig_profile" not in r.instances and "gpu_fraction" not in r.instances and "mig" not in r.summary


class _View:
    def __init__(self, gpus, sm):
        self.facts = {"gpus": np.array(gpus), "sm_fraction": np.array(sm, dtype=float)}


def test_mig_penalty_sends_long_prompts_to_larger_instances():
    scorer = MigPenaltyScorer(None)
    view = _View([1, 1, 1], [1.0, 3 / 7, 1 / 7])
    long_scores = scorer.score(Request(0, 0, 4096, 10), view)
    assert long_scores == pytest.approx([1.0, 3 / 7, 1 / 7])
    short = scorer.score(Request(1, 0, 64, 10), view)
    assert short.min() > 0.85 and short[0] == 1.0
    assert scorer.score(Request(2, 0, 4096, 10), _View([1, 1], [1.0, 1.0])) == pytest.approx([1.0, 1.0])


def test_mig_penalty_routes_long_prompts_off_small_slices():
    over = ["cluster=mig_mixed", "policy=weighted", "policy.routing.scorers.prefix_affinity=0",
            "policy.routing.scorers.kv_utilization=0", "policy.routing.scorers.queue_depth=0", *SMALL]
    with_penalty = simulate(load_config([*over, "policy.routing.scorers.mig_penalty=3",
                                         "policy.routing.scorers.load_balance=1"])).instances
    without = simulate(load_config([*over, "policy.routing.scorers.load_balance=1"])).instances
    whole = with_penalty["mig_profile"] == ""
    assert with_penalty["admitted"][whole].sum() > without["admitted"][whole].sum()


def test_mig_json_has_a_source_for_every_gpu():
    from importlib import resources

    data = json.loads(resources.files("distsim.catalog").joinpath("data", "mig.json").read_text())
    for gpu, entry in data["gpus"].items():
        assert all(key.strip() in data["_sources"] for key in entry["source"].split(",")), gpu


def test_hedging_prices_a_slices_wasted_work_at_its_share_of_a_gpu():
    r = simulate(load_config(["cluster=mig_mixed", "policy=hedged", "workload=mmpp_heavy_tail", "workload.num_requests=200"]))
    inst, hedging = r.instances, r.summary["hedging"]
    busy_gpu_s = float((inst["busy_ms"] / 1000.0 * inst["gpus"] * inst["gpu_fraction"]).sum())
    assert hedging["copies_sent"] > 0
    assert hedging["wasted_gpu_fraction"] == pytest.approx(hedging["wasted_gpu_s"] / busy_gpu_s, rel=1e-3, abs=1e-6)
