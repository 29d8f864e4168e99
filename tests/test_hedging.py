"""Hedged requests (policy.hedge, distsim.cluster.hedging): a hand-computed hedge that wins, a request
recorded exactly once with every copy's blocks freed and the invariants (INV-1, INV-2, INV-22) checked
after every event, cancellation in each place a copy can be (queue, running prefill or decode, CPU load,
dispatch), fast-forward exactness, a hedge that never fires changing nothing, the outputs, determinism and
bad input."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from raykit import sweep_on_local_ray
from simkit import FAKE_HW, engine, run, tiny_model

from distsim import load_config, simulate
from distsim.cluster import settings as cluster_settings
from distsim.cluster.hedging import hedging_columns
from distsim.cluster.pools import PoolSpec
from distsim.config.schema import PolicyConfig
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request
from distsim.resolve import hedging_fits
from distsim.simulate import summary_json
from distsim.workload.settings import SloDefaults

LATENCY = LinearLatency(100.0, 2.0, 5.0)  # step = 100 us + 2 us per prefill token + 5 us per decoder


def hedge_policy(routing: str = "round_robin", **hedge) -> object:
    node = OmegaConf.structured(PolicyConfig)
    node.routing.kind = routing
    for key, value in hedge.items():
        node.hedge[key] = value
    return cluster_settings.policy(node)


def bursty(n: int = 300, seed: int = 0, shared: bool = False) -> list[Request]:
    """Bursts of arrivals that queue on some instances, varied lengths; ``shared``: prompts share prefixes."""
    rng = np.random.default_rng(seed)
    gaps = np.where(rng.random(n) < 0.8, rng.exponential(200.0, n), rng.exponential(20_000.0, n))
    t = np.cumsum(gaps).astype(np.int64)
    prompts, outputs = rng.integers(8, 120, n), rng.integers(1, 40, n)
    out = []
    for i in range(n):
        hashes = tuple(range(1000 * (i % 5), 1000 * (i % 5) + int(prompts[i]) // 4)) if shared else None
        out.append(Request(i, int(t[i]), int(prompts[i]), int(outputs[i]), block_hashes=hashes))
    return out


def test_a_queued_request_is_answered_by_its_copy_on_the_idle_instance():
    # round robin: A (long prompt, lax SLO) on 0, B (one token) on 1, C (10 ms SLO) on 0 behind A. C's copy
    # goes out 0.1 x 10 ms after C arrives, when instance 1 is idle again: it answers first; C leaves
    # instance 0's queue at once. (A's 4.1 ms prompt is within a tenth of its SLO: never hedged.)
    reqs = [Request(0, 0, 2000, 2, ttft_slo_ms=1e6), Request(1, 0, 10, 1), Request(2, 10, 10, 2, ttft_slo_ms=10.0)]
    params = engine(max_num_batched_tokens=4096, total_kv_blocks=1000)
    pol = hedge_policy(delay_slo_fraction=0.1)
    sim = run(reqs, params, LATENCY, instances=2, policy_cfg=pol, check_every_event=True)
    table = sim.recorder.table().set_index("request_id")
    assert table.loc[2, "instance"] == 1 and table.loc[2, "status"] == "completed"
    # the copy reached instance 1 at 1,010 us and its prompt took one step of 100 + 2 * 10 us
    assert table.loc[2, "first_token_ms"] == pytest.approx((1010 + 120) / 1000.0)
    cols = hedging_columns(sim.cluster.hedgers, table.index.to_numpy(), {0: (0.0, 0.0), 1: (0.0, 0.0)})
    assert cols["copies"].tolist() == [1, 1, 2] and cols["hedge_winner"].tolist() == [-1, -1, 1]
    assert cols["wasted_prefill_tokens"][2] == 0  # cancelled before it ran
    assert sim.cluster.instances[0].stats.admitted == 1  # C never started on instance 0


def _check_all_freed(sim) -> None:
    for inst in sim.cluster.instances:
        assert not inst.running and not len(inst.waiting) and not inst.aborts and not inst.cancellation.abort_loads
        assert inst.kv.used() == 0, f"instance {inst.index} holds {inst.kv.used()} blocks after the run"


@pytest.mark.parametrize("target", ["router", "least_outstanding", "random"])
@pytest.mark.parametrize("routing", ["round_robin", "least_loaded"])
def test_every_request_is_recorded_once_and_every_copy_frees_its_blocks(target, routing):
    reqs = bursty()
    params = engine(max_num_seqs=4, max_num_batched_tokens=64, total_kv_blocks=60)
    pol = hedge_policy(routing, delay_ms=0.5, max_copies=3, target=target)
    sim = run(reqs, params, LATENCY, instances=3, policy_cfg=pol, check_every_event=True)
    table = sim.recorder.table()
    assert sorted(table["request_id"]) == list(range(len(reqs)))  # once each
    assert (table["status"] == "completed").all()
    hedger = sim.cluster.hedger
    assert hedger.copies_sent > 20 and hedger.cancelled > 0
    assert all(group.recorded and group.live == 0 for group in hedger.groups.values())
    _check_all_freed(sim)


def test_cancelling_running_copies_preempted_ones_and_cpu_loads_keeps_every_invariant():
    # a small cache (preemptions), shared prefixes and a CPU tier (loads a copy can be cancelled in)
    reqs = bursty(n=250, shared=True)
    params = engine(max_num_seqs=6, max_num_batched_tokens=48, total_kv_blocks=48, cpu_kv_blocks=200)
    slow_link = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.01)
    pools = [PoolSpec("p", 3, "mixed", slow_link, tiny_model(1000), 1, params, LATENCY, "cluster")]
    sim = run(reqs, pools=pools, policy_cfg=hedge_policy(delay_ms=0.3, max_copies=3), check_every_event=True)
    assert (sim.recorder.table()["status"] == "completed").all()
    assert sum(inst.stats.preemptions for inst in sim.cluster.instances) > 0
    groups = sim.cluster.hedger.groups.values()
    assert any(g.wasted_prefill > 0 for g in groups)  # some copies were cancelled while running
    _check_all_freed(sim)


def test_a_keyed_waiting_queue_gives_up_a_cancelled_copy():
    reqs = bursty(n=200)
    for i, req in enumerate(reqs):
        req.priority = i % 3
    params = engine(max_num_seqs=4, max_num_batched_tokens=64, total_kv_blocks=60, scheduler="priority")
    sim = run(reqs, params, LATENCY, instances=3, policy_cfg=hedge_policy(delay_ms=0.5), check_every_event=True)
    assert (sim.recorder.table()["status"] == "completed").all()
    _check_all_freed(sim)


def test_fast_forward_gives_the_same_hedged_results():
    kw = dict(instances=3, policy_cfg=hedge_policy(delay_ms=0.5, max_copies=3))
    params = engine(max_num_seqs=8, max_num_batched_tokens=64, total_kv_blocks=200)
    a = run(bursty(), params, LATENCY, fast_forward=True, **kw)
    b = run(bursty(), params, LATENCY, fast_forward=False, **kw)
    pd.testing.assert_frame_equal(a.recorder.table(), b.recorder.table())
    ids = a.recorder.table()["request_id"].to_numpy()
    rates = {i: (0.0, 0.0) for i in range(3)}
    for name, col in hedging_columns(a.cluster.hedgers, ids, rates).items():
        assert (col == hedging_columns(b.cluster.hedgers, ids, rates)[name]).all(), name


def test_copies_in_flight_at_the_horizon_collapse_into_one_unfinished_record():
    reqs = bursty(n=200)
    params = engine(max_num_seqs=4, max_num_batched_tokens=64, total_kv_blocks=60)
    sim = run(reqs, params, LATENCY, instances=3, policy_cfg=hedge_policy(delay_ms=0.3, max_copies=3),
              horizon_us=int(reqs[150].arrival_us) + 1000, check_every_event=True)  # fmt: skip
    table = sim.recorder.table()
    assert sorted(table["request_id"]) == list(range(sim.cluster.arrived))  # each arrived request once
    unfinished = table[table["status"] == "unfinished"]
    assert len(unfinished) > 0
    hedged_unfinished = [rid for rid in unfinished["request_id"] if rid in sim.cluster.hedger.groups]
    assert hedged_unfinished and all(sim.cluster.hedger.groups[rid].live == 0 for rid in hedged_unfinished)
    # one of them had answered on a copy: the record carries that copy's first token
    answered = [sim.cluster.hedger.groups[rid] for rid in hedged_unfinished if sim.cluster.hedger.groups[rid].winner >= 0]
    assert answered and all(g.copies[0].first_token_us == g.copies[g.winner].first_token_us >= 0 for g in answered)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), delay_ms=st.floats(0.0, 3.0), copies=st.integers(2, 4))
def test_hedging_conserves_requests_and_blocks_for_any_delay(seed, delay_ms, copies):
    reqs = bursty(n=120, seed=seed, shared=seed % 2 == 0)
    params = engine(max_num_seqs=4, max_num_batched_tokens=48, total_kv_blocks=50)
    pol = hedge_policy("least_loaded", delay_ms=delay_ms, max_copies=copies, target="random")
    sim = run(reqs, params, LATENCY, instances=4, policy_cfg=pol, check_every_event=True, seed=seed)
    assert sorted(sim.recorder.table()["request_id"]) == list(range(len(reqs)))
    _check_all_freed(sim)


# ---- through the config: outputs, no change when it never fires, determinism, bad input ----------

BASE = ["workload=mmpp_burst", "workload.num_requests=300", "cluster.instances=3", "workload.slo.ttft_ms=100"]


def _run(*overrides):
    return simulate(load_config([*BASE, *overrides]))


def test_a_hedge_that_never_fires_changes_nothing_but_adds_its_columns():
    plain = _run()
    never = _run("policy.hedge.delay_ms=1e9")
    assert never.summary["hedging"]["hedged"] == 0
    rest = {k: v for k, v in never.summary.items() if k != "hedging"}
    assert summary_json(rest) == summary_json(plain.summary)
    extra = ["copies", "hedge_winner", "wasted_prefill_tokens", "wasted_decode_tokens", "wasted_gpu_s"]
    pd.testing.assert_frame_equal(never.requests.drop(columns=extra), plain.requests)
    pd.testing.assert_frame_equal(never.instances, plain.instances)


def test_the_summary_and_columns_agree_and_runs_are_deterministic():
    a = _run("policy.hedge.delay_slo_fraction=0.2", "policy.hedge.target=random", "seed=3")
    b = _run("policy.hedge.delay_slo_fraction=0.2", "policy.hedge.target=random", "seed=3")
    assert summary_json(a.summary) == summary_json(b.summary)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    h, req = a.summary["hedging"], a.requests
    assert h["hedged"] == (req["copies"] > 1).sum() > 0
    assert h["wins"]["original"] + h["wins"]["hedge"] + h["wins"]["none"] == h["hedged"]
    assert h["wasted_prefill_tokens"] == req["wasted_prefill_tokens"].sum()
    assert h["wasted_gpu_s"] == pytest.approx(req["wasted_gpu_s"].sum(), abs=1e-4)
    assert (req.loc[req["copies"] == 1, "wasted_gpu_s"] == 0).all()
    assert a.summary["requests"]["completed"] == 300


def test_hedged_jobs_on_ray_equal_the_same_runs_in_process(tmp_path):
    hedge = ["policy.hedge.delay_slo_fraction=0.2", "policy.hedge.target=random", "seed=0,1"]
    outcome = sweep_on_local_ray([*BASE, *hedge], tmp_path)
    assert outcome.ok == 2 and outcome.failed == 0
    for _, row in pd.read_parquet(tmp_path / "results.parquet").iterrows():
        job = tmp_path / str(row["job"])
        alone = simulate(load_config(row["overrides"].split()))
        assert (job / "summary.json").read_text() == summary_json(alone.summary)
        assert json.loads((job / "summary.json").read_text())["hedging"]["hedged"] > 0
        pd.testing.assert_frame_equal(pd.read_parquet(job / "requests.parquet"), alone.requests)


def test_hedging_runs_inside_cells():
    reqs = bursty(n=200)
    params = engine(max_num_seqs=4, max_num_batched_tokens=64, total_kv_blocks=60)
    sim = run(reqs, params, LATENCY, instances=4, policy_cfg=hedge_policy(delay_ms=0.5), cells={"count": 2},
              check_every_event=True)  # fmt: skip
    assert sorted(sim.recorder.table()["request_id"]) == list(range(len(reqs)))
    assert sum(h.copies_sent for h in sim.cluster.hedgers) > 0


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["policy.hedge.delay_ms=10", "policy.hedge.delay_slo_fraction=0.3"], "policy.hedge.delay_ms"),
        (["policy.hedge.delay_ms=10", "policy.hedge.max_copies=1"], "policy.hedge.max_copies"),
        (["policy.hedge.delay_ms=10", "policy.hedge.target=fastest"], "policy.hedge.target"),
        (["policy.hedge.delay_slo_fraction=-0.2"], "policy.hedge.delay_slo_fraction"),
        (["policy.hedge.delay_ms=-1"], "policy.hedge.delay_ms"),
        (["policy.hedge.delay_ms=10", "cluster=pd_disagg"], "policy.hedge"),
        (["policy.hedge.delay_ms=10", "cluster.instances=1"], "policy.hedge"),
    ],
)
def test_bad_hedge_settings_name_their_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["workload.num_requests=10", *overrides]))
    assert err.value.key == key


def test_a_delay_in_slo_fractions_needs_a_finite_ttft_slo():
    pools = [PoolSpec("p", 2, "mixed", FAKE_HW, tiny_model(1000), 1, engine(), LATENCY, "cluster")]
    with pytest.raises(ConfigError) as err:
        hedging_fits(hedge_policy(delay_slo_fraction=0.3), pools, SloDefaults(math.inf, math.inf))  # no TTFT SLO
    assert err.value.key == "policy.hedge.delay_slo_fraction"
    hedging_fits(hedge_policy(delay_ms=5.0), pools, SloDefaults(math.inf, math.inf))  # a fixed delay needs none
