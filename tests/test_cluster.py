"""The cluster layer: known orderings, stale signals, P/D hand-off, herding, pools, tracing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from simkit import FAKE_HW, engine, policy, run, signals, tiny_model
from simkit import transfer as simkit_transfer

from distsim import load_config, simulate
from distsim.cluster.pools import PoolSpec
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request

PARAMS = engine(max_num_seqs=4, max_num_batched_tokens=512, block_size=16, total_kv_blocks=4000)
LAT = LinearLatency(2000.0, 2.0, 100.0)


def loaded_requests(seed=0, n=3000, rate=60.0):
    """Poisson arrivals at about 80% of four instances' capacity, varied lengths."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1e6 / rate, n)).astype(np.int64)
    P = rng.integers(50, 400, n)
    D = rng.integers(10, 200, n)
    return [Request(i, int(t[i]), int(P[i]), int(D[i])) for i in range(n)]


def mean_queue(routing, signals_cfg=None, seed=0):
    sim = run(loaded_requests(seed), PARAMS, LAT, instances=4, routing=routing, signals_cfg=signals_cfg)
    return sim.recorder.table()["queue_ms"].mean()


def test_known_ordering_least_loaded_round_robin_random():
    ll, rr, rnd = mean_queue("least_loaded"), mean_queue("round_robin"), mean_queue("random")
    assert ll <= rr <= rnd, (ll, rr, rnd)


def test_heavy_staleness_erodes_least_loaded():
    fresh = mean_queue("least_loaded")
    stale_250 = mean_queue("least_loaded", signals(250.0))
    stale_1s = mean_queue("least_loaded", signals(1000.0))
    rr = mean_queue("round_robin")
    # every decision between two scrapes sees the same minimum: the router herds
    assert fresh < stale_250 < stale_1s
    assert stale_1s > rr


@pytest.mark.parametrize("routing", ["least_loaded", "least_kv", "weighted", "power_of_two"])
@pytest.mark.parametrize("interval", [0.0, 50.0])
def test_signal_reading_policies_give_identical_results_with_and_without_fast_forward(routing, interval):
    reqs = loaded_requests(n=600)
    kw = dict(instances=4, routing=routing, signals_cfg=signals(interval, delay_ms=5.0 if interval else 0.0))
    a = run(reqs, PARAMS, LAT, fast_forward=True, **kw).recorder.table()
    b = run(loaded_requests(n=600), PARAMS, LAT, fast_forward=False, **kw).recorder.table()
    pd.testing.assert_frame_equal(a, b)


def test_prefix_aware_routing_raises_the_cache_hit_rate():
    base = ["cluster.instances=4", "workload=prefix_heavy", "workload.num_requests=1200", "workload.arrival.rate_rps=30"]
    rates = {p: simulate(load_config([*base, f"policy={p}"])).summary["prefix_cache_hit_rate"] for p in ("round_robin", "prefix_affinity", "weighted")}
    assert rates["prefix_affinity"] > rates["round_robin"] + 0.02
    assert rates["weighted"] > rates["round_robin"] + 0.02


def test_prefix_aware_routing_raises_the_cache_hit_rate_on_the_mooncake_trace():
    base = ["cluster.instances=4", "workload=mooncake_conversation", "workload.max_rows=1500"]
    rr = simulate(load_config([*base, "policy=round_robin"])).summary["prefix_cache_hit_rate"]
    pa = simulate(load_config([*base, "policy=prefix_affinity"])).summary["prefix_cache_hit_rate"]
    assert pa > rr * 1.1, (rr, pa)


def test_no_herding_when_most_requests_share_one_prefix():
    """A peer with llm-d-like defaults sends every request to one of four instances here."""
    rng = np.random.default_rng(5)
    shared = tuple(range(1000, 1000 + 64))  # one 1024-token system prompt
    reqs = []
    t = 0
    for i in range(1500):
        t += int(rng.exponential(1e6 / 40))
        own = tuple(10**6 + i * 100 + k for k in range(8))
        hashes = shared + own if rng.random() < 0.9 else own
        reqs.append(Request(i, t, 16 * len(hashes) + 5, int(rng.integers(20, 120)), block_hashes=hashes))
    params = engine(max_num_seqs=32, max_num_batched_tokens=2048, block_size=16, total_kv_blocks=20_000)
    lat = LinearLatency(3000.0, 0.3, 60.0)
    for routing in ("prefix_affinity", "weighted"):
        pol = policy(routing, r_load_guard=8)
        sim = run([Request(r.request_id, r.arrival_us, r.prompt_tokens, r.output_tokens, block_hashes=r.block_hashes) for r in reqs],
                  params, lat, instances=4, policy_cfg=pol)
        df = sim.recorder.table()
        shares = df.groupby("instance").size() / len(df)
        assert len(shares) == 4 and shares.max() < 0.4, (routing, shares.tolist())
        assert df["cached_tokens"].sum() > 0.5 * 1024 * 0.9 * len(df)  # and the prefix is still reused


def _pd_pools(transfer_bytes_per_token=1000):
    model = tiny_model(transfer_bytes_per_token)
    params = engine(max_num_seqs=8, max_num_batched_tokens=256, block_size=16, total_kv_blocks=200)
    lat = LinearLatency(100.0, 2.0, 5.0)
    return [
        PoolSpec("prefill", 1, "prefill", FAKE_HW, model, 1, params, lat, "cluster.pools[0]"),
        PoolSpec("decode", 1, "decode", FAKE_HW, model, 1, params, lat, "cluster.pools[1]"),
    ]


def test_pd_transfer_time_matches_the_formula_and_ttft_includes_it():
    transfer = simkit_transfer(1.0, 10.0)
    sim = run([Request(0, 0, 100, 5)], pools=_pd_pools(), transfer_cfg=transfer)
    row = sim.recorder.table().iloc[0]
    prefill_us = 100 + 2 * 100  # one step computes the whole prompt
    transfer_us = 10 + 100 * 1000 / 1e9 * 1e6  # latency + bytes / bandwidth
    assert row["ttft_ms"] * 1000 == prefill_us + transfer_us
    assert row["e2e_ms"] * 1000 == prefill_us + transfer_us + 4 * (100 + 5 * 1)  # four decode steps
    assert (row["prefill_instance"], row["instance"]) == (0, 1)
    assert sim.cluster.transfers == 1


def test_pd_blocks_are_conserved_across_the_hand_off():
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.exponential(2000, 300)).astype(int)
    reqs = [Request(i, int(t[i]), int(rng.integers(10, 300)), int(rng.integers(1, 60))) for i in range(300)]
    transfer = simkit_transfer(0.5, 50.0)
    sim = run(reqs, pools=_pd_pools(), transfer_cfg=transfer, check_every_event=True)
    df = sim.recorder.table()
    assert (df["status"] == "completed").all() and sim.checks > 0
    for inst in sim.cluster.instances:
        assert inst.kv.used() == 0 and not inst.held and not inst.reserved
    # one-token answers complete on the prefill instance without a transfer
    assert sim.cluster.transfers == int((df["output_tokens"] > 1).sum())


def test_pd_cluster_config_runs_end_to_end():
    r = simulate(load_config(["cluster=pd_disagg", "workload.num_requests=300", "policy=least_loaded"]))
    assert r.summary["requests"]["completed"] == 300
    assert r.summary["kv_transfer"]["transfers"] == 300
    roles = r.instances.set_index("instance")["role"]
    assert set(roles[r.requests["prefill_instance"]]) == {"prefill"} and set(roles[r.requests["instance"]]) == {"decode"}


def test_heterogeneous_pools_sum_each_pools_price():
    r = simulate(load_config(["cluster=heterogeneous", "workload.num_requests=400", "policy=least_loaded"]))
    inst = r.instances
    assert sorted(inst.groupby("pool")["gpus"].sum().items()) == [("a100", 8), ("h100", 8)]
    from distsim.catalog import load_hardware

    dollars_per_hour = 8 * load_hardware("H100").price_usd_per_gpu_hour + 8 * load_hardware("A100-80G").price_usd_per_gpu_hour
    span_h = r.summary["sim"]["simulated_s"] / 3600
    done = r.requests[r.requests.status == "completed"]
    tokens_k = (done["input_tokens"].sum() + done["output_tokens"].sum()) / 1000
    assert r.summary["cost_usd_per_1k_tokens"] == pytest.approx(dollars_per_hour * span_h / tokens_k, rel=1e-3)


def test_decision_tracing_is_off_by_default_and_records_regret_when_on():
    assert simulate(load_config(["workload.num_requests=50"])).decisions is None
    r = simulate(load_config(["workload.num_requests=200", "policy=weighted", "policy.trace_decisions=true"]))
    d = r.decisions
    assert len(d) == 200 and (d["regret"] >= 0).all()
    assert (d["regret"] == 0).all()  # weighted takes the argmax of its own scores
    assert all(len(s) == 4 for s in d["scores"])


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["cluster.pools=[{name: d, count: 2, role: decode}]"], "cluster.pools"),
        (["cluster.pools=[{name: a, count: 1, role: prefill}, {name: b, count: 1, role: mixed}]"], "cluster.pools"),
        (["cluster.pools=[{name: a, count: 1, role: chef}]"], "cluster.pools[0].role"),
        (["policy=weighted", "policy.routing.scorers.queue_depth=-1"], "policy.routing.scorers.queue_depth"),
        (["signals.refresh_interval_ms=-5"], "signals.refresh_interval_ms"),
        (["signals=stale_50ms", "signals.jitter_ms=80"], "signals.jitter_ms"),
        (["policy=token_bucket", "policy.admission.capacity_tokens=0"], "policy.admission.capacity_tokens"),
        (["cluster=pd_disagg", "cluster.kv_transfer.bandwidth_gbps=0"], "cluster.kv_transfer.bandwidth_gbps"),
    ],
)
def test_bad_cluster_and_policy_configs_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        simulate(load_config(["workload.num_requests=10", *overrides]))
    assert info.value.key == key


def test_stale_signals_are_cheap():
    """A scrape copies a few small arrays; it never touches the caches. Count the work: scrape events are
    a small share of all events and their number follows the interval."""
    live = simulate(load_config(["workload.num_requests=1000", "policy=least_loaded"]))
    stale = simulate(load_config(["workload.num_requests=1000", "policy=least_loaded", "signals.refresh_interval_ms=100"]))
    span_s = stale.summary["sim"]["simulated_s"]
    assert stale.summary["signals"]["scrapes"] == pytest.approx(5 * span_s * 10, rel=0.05)
    assert stale.summary["sim"]["events"] - live.summary["sim"]["events"] <= 1.05 * stale.summary["signals"]["scrapes"]
