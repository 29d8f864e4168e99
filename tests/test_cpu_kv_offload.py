"""The CPU KV tier (cluster.engine.cpu_kv_blocks, vLLM's KV offloading): a hand-computed load, a prefix
evicted from the GPU found on the CPU, blocks conserved on both tiers with every request placed after every
event (INV-1, INV-2, INV-12, INV-15), no change with the tier off, and bad values refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from clikit import assert_user_error, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import FAKE_HW, engine, run, tiny_model, transfer

from distsim import load_config, simulate
from distsim.cluster.pools import PoolSpec
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request
from distsim.simulate import summary_json

LATENCY = LinearLatency(100.0, 2.0, 5.0)  # step = 100 us + 2 us per prefill token + 5 us per decoder
SLOW_LINK = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.001)  # 1e6 B/s: a 4,000-byte block in 4 ms
MODEL = tiny_model(1000)  # 1,000 KV bytes per token: a block of 4 tokens is 4,000 bytes


def _pool(params, hw=SLOW_LINK, count=1, role="mixed", name="p"):
    return PoolSpec(name, count, role, hw, MODEL, 1, params, LATENCY, "cluster")


def _evict_then_return(cpu_blocks: int, horizon_us: int | None = None):
    """A computes a 33-token prompt (8 hashed blocks of 4 tokens); B, without hashes, takes the whole
    12-block GPU cache and evicts A's blocks; C resends A's prompt on an idle instance."""
    prefix = tuple(range(100, 108))
    reqs = [
        Request(0, 0, 33, 2, block_hashes=prefix),
        Request(1, 50_000, 44, 2),
        Request(2, 100_000, 33, 2, block_hashes=prefix),
    ]
    params = engine(block_size=4, total_kv_blocks=12, cpu_kv_blocks=cpu_blocks)
    return run(reqs, pools=[_pool(params)], check_every_event=True, horizon_us=horizon_us)


def test_a_load_takes_the_hand_computed_time_and_delays_the_request():
    sim = _evict_then_return(100)
    table = sim.recorder.table().set_index("request_id")
    inst = sim.cluster.instances[0]
    cpu = inst.cpu
    # A's prefill step ends at 100 + 2 x 33 = 166 us; its 8 full blocks are copied to the CPU then:
    # 8 x 4,000 B / 1e6 B/s = 32,000 us on the device-to-host direction
    assert cpu.stored_blocks == 8 and cpu.store_us == 32_000
    # C misses on the GPU (B evicted A's blocks), hits 8 blocks on the CPU: loaded from 100,000 to 132,000 us
    assert (cpu.loads, cpu.hit_blocks, cpu.load_us) == (1, 8, 32_000)
    c = table.loc[2]
    assert c["queue_ms"] == 32.0  # not schedulable until its blocks landed
    assert c["cached_tokens"] == 32  # the loaded tokens count as computed
    assert c["ttft_ms"] == pytest.approx(32.102)  # then one step computes its last token: 100 + 2 x 1 us
    assert inst.stats.prefill_tokens == 33 + 44 + 1
    assert (table["status"] == "completed").all() and not inst.loading and not cpu.pinned
    assert inst.kv.available() == inst.kv.total


def test_a_prefix_evicted_from_the_gpu_but_on_the_cpu_is_not_recomputed():
    with_tier = _evict_then_return(100)
    without = _evict_then_return(0)
    assert without.cluster.instances[0].cpu is None
    assert without.cluster.instances[0].stats.prefill_tokens == 33 + 44 + 33
    assert with_tier.cluster.instances[0].stats.prefill_tokens == 33 + 44 + 1
    assert without.recorder.table().set_index("request_id").loc[2, "cached_tokens"] == 0


def test_a_request_waiting_only_for_its_load_is_placed_and_ends_unfinished_at_the_horizon():
    sim = _evict_then_return(100, horizon_us=110_000)  # C's load lands at 132,000 us
    inst = sim.cluster.instances[0]
    assert list(inst.loading) == [2] and not inst.busy and sim.loop.pending() > 0  # INV-12: its event waits
    table = sim.recorder.table().set_index("request_id")
    assert table.loc[2, "status"] == "unfinished" and len(table) == 3


def _shared_prefix_requests(seed: int, n: int, gap_us: float, pmax: int, dmax: int, bs: int) -> list[Request]:
    """Requests whose prompts open with one of three prefix chains (a shorter prompt shares the head of a
    longer one), a fifth of them without hashes."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_us, n)).astype(int)
    out = []
    for i in range(n):
        p = int(rng.integers(1, pmax + 1))
        group = int(rng.integers(0, 3))
        hashes = None if rng.random() < 0.2 else tuple(group * 10_000 + k for k in range(p // bs))
        out.append(Request(i, int(t[i]), p, int(rng.integers(1, dmax + 1)), block_hashes=hashes))
    return out


def test_the_tier_saves_prefill_compute_under_gpu_pressure():
    reqs = lambda: _shared_prefix_requests(7, 300, 400.0, 120, 20, 4)  # noqa: E731
    params = dict(block_size=4, total_kv_blocks=60, max_num_batched_tokens=128)
    fast = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=1.0)
    off = run(reqs(), pools=[_pool(engine(**params), hw=fast)])
    on = run(reqs(), pools=[_pool(engine(**params, cpu_kv_blocks=500), hw=fast)], check_every_event=True)
    cpu = on.cluster.instances[0].cpu
    assert cpu.hit_blocks > 0 and cpu.evicted_blocks == 0
    assert on.cluster.instances[0].stats.prefill_tokens < off.cluster.instances[0].stats.prefill_tokens
    assert (on.recorder.table()["status"] == "completed").all()


configs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10_000),
        "n": st.integers(10, 80),
        "gap_us": st.sampled_from([50.0, 500.0, 5_000.0]),
        "pmax": st.integers(8, 80),
        "dmax": st.integers(1, 30),
        "bs": st.sampled_from([1, 2, 4, 8]),
        "gpu_tokens": st.integers(60, 240),  # the GPU cache, in tokens: tight enough to evict shared prefixes
        "cpu_share": st.sampled_from([0.1, 1.0, 4.0]),  # the CPU tier's size against the GPU cache's
        "link_gbps": st.sampled_from([0.01, 0.1, 1.0]),  # 1,000 bytes a token: 4 tokens in 400, 40, 4 us
        "seqs": st.integers(1, 8),
        "tokens_extra": st.integers(0, 60),
        "chunked": st.booleans(),
        "reserve_full": st.booleans(),
        "scheduler": st.sampled_from(["fcfs", "priority"]),
        "instances": st.integers(1, 2),
    }
)


def _random_engine(c):
    """The engine and the hardware (its host link) a drawn config describes."""
    params = engine(
        max_num_seqs=c["seqs"],
        max_num_batched_tokens=max(c["seqs"], 8) + c["tokens_extra"] + (0 if c["chunked"] else 80),
        block_size=c["bs"],
        total_kv_blocks=c["gpu_tokens"] // c["bs"],
        enable_chunked_prefill=c["chunked"],
        scheduler_reserve_full_isl=c["reserve_full"],
        scheduler=c["scheduler"],
        cpu_kv_blocks=max(1, int(c["cpu_share"] * c["gpu_tokens"] // c["bs"])),
    )
    hw = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=c["link_gbps"])
    return [_pool(params, hw=hw, count=c["instances"])]


def _random_requests(c):
    return _shared_prefix_requests(c["seed"], c["n"], c["gap_us"], c["pmax"], c["dmax"], c["bs"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_blocks_are_conserved_on_both_tiers_and_every_request_finishes(c):
    reqs = _random_requests(c)
    sim = run(
        reqs, pools=_random_engine(c), check_every_event=True
    )  # INV-1, 2, 3, 12 and 15 after every event
    table = sim.recorder.table()
    assert len(table) == len(reqs) and table["request_id"].is_unique
    assert set(table["status"]) <= {"completed", "dropped"}
    for inst in sim.cluster.instances:
        cpu = inst.cpu
        assert inst.kv.available() == inst.kv.total and not inst.loading and not cpu.pinned
        assert len(cpu.blocks) <= cpu.total and cpu.free + len(cpu.blocks) == cpu.total


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_fast_forward_equals_stepping_with_a_cpu_tier(c):
    """INV-8: a store landing during a decode run can change what the waiting head loads; the run is
    replanned at that boundary, as stepping one by one would see it."""
    fast = run(_random_requests(c), pools=_random_engine(c), fast_forward=True)
    slow = run(_random_requests(c), pools=_random_engine(c), fast_forward=False)
    pd.testing.assert_frame_equal(fast.recorder.table(), slow.recorder.table())
    for a, b in zip(fast.cluster.instances, slow.cluster.instances):
        assert (a.cpu.stored_blocks, a.cpu.hit_blocks, a.cpu.load_us) == (
            b.cpu.stored_blocks,
            b.cpu.hit_blocks,
            b.cpu.load_us,
        )


def test_a_pd_cluster_with_cpu_tiers_finishes_every_request_with_invariants_after_every_event():
    prefill = engine(
        max_num_seqs=16, max_num_batched_tokens=256, block_size=16, total_kv_blocks=60, cpu_kv_blocks=200
    )
    decode = engine(
        max_num_seqs=64, max_num_batched_tokens=256, block_size=16, total_kv_blocks=80, cpu_kv_blocks=50
    )
    fast = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.1)
    pools = [
        _pool(prefill, hw=fast, count=2, role="prefill", name="prefill"),
        _pool(decode, hw=fast, count=1, role="decode", name="decode"),
    ]
    reqs = _shared_prefix_requests(3, 300, 300.0, 400, 150, 16)
    sim = run(reqs, pools=pools, transfer_cfg=transfer(0.5, 50.0), check_every_event=True)
    assert (sim.recorder.table()["status"] == "completed").all()
    assert sum(inst.cpu.hit_blocks for inst in sim.cluster.instances[:2]) > 0


TINY = ["workload.num_requests=60", "cluster.instances=2"]


def test_cpu_kv_blocks_zero_is_the_simulator_without_a_tier():
    base = simulate(load_config(TINY))
    off = simulate(load_config([*TINY, "cluster.engine.cpu_kv_blocks=0"]))
    assert summary_json(off.summary) == summary_json(base.summary) and "cpu_kv" not in off.summary
    pd.testing.assert_frame_equal(off.requests, base.requests)
    pd.testing.assert_frame_equal(off.instances, base.instances)
    assert not any(col.startswith("cpu_") for col in off.instances.columns)


def test_a_tier_that_is_never_hit_changes_no_request_and_reports_its_counters():
    big_gpu = [*TINY, "cluster.engine.total_kv_blocks=20000"]  # nothing is ever evicted from the GPU
    base = simulate(load_config(big_gpu))
    on = simulate(load_config([*big_gpu, "cluster.engine.cpu_kv_blocks=5000"]))
    pd.testing.assert_frame_equal(on.requests, base.requests)
    counts = on.summary["cpu_kv"]
    assert counts["blocks"] == 10_000 and counts["stored_blocks"] > 0 and counts["loads"] == 0
    assert counts["hit_rate"] == 0.0 and counts["load_ms_mean"] is None
    assert (on.instances["cpu_stored_blocks"] > 0).all() and (on.instances["cpu_kv_blocks"] == 5000).all()
    json.loads(summary_json(on.summary))


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["cluster.engine.cpu_kv_blocks=-1"], "must be a non-negative integer"),
        (
            ["cluster.engine.cpu_kv_blocks=64", "cluster.engine.enable_prefix_caching=false"],
            "needs enable_prefix_caching=true",
        ),
    ],
)
def test_a_bad_cpu_kv_blocks_is_a_config_error_naming_the_key(overrides, words):
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*TINY, *overrides]))
    assert "cluster.engine.cpu_kv_blocks" in str(err.value) and words in str(err.value)


def test_a_pool_override_is_checked_too_and_the_cli_says_it_in_one_line(tmp_path):
    pool = "cluster.pools=[{name: a, count: 1, hardware: H100, role: mixed, engine: {cpu_kv_blocks: -5}, latency: {}}]"
    proc = run_module("distsim", *TINY, pool, f"hydra.run.dir={tmp_path / 'run'}")
    assert_user_error(proc, 2, "cluster.pools[0].engine.cpu_kv_blocks", "non-negative integer")
