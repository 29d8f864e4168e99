"""The storage KV tier below the CPU tier (cluster.engine.storage_kv, LMCache's local disk backend): a
hand-computed write-back and load, blocks conserved on the three tiers after every event (INV-32), every
block read from the drive written there before (and evicted from the CPU tier before that), the drive's
operation time, LRU and dropped writes, fast-forwarding equal to stepping, no change with the tier off,
a workload whose prefixes outgrow GPU and CPU helped by it, determinism, and bad values refused."""

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
from distsim.instance.cpu_kv import CpuKvTier
from distsim.instance.latency.linear import LinearLatency
from distsim.instance.storage_kv.settings import StorageKvSettings
from distsim.instance.storage_kv.tier import StorageKvTier
from distsim.request import Request
from distsim.simulate import summary_json

LATENCY = LinearLatency(100.0, 2.0, 5.0)  # step = 100 us + 2 us per prefill token + 5 us per decoder
SLOW_LINK = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.001)  # 1e6 B/s: a 4,000-byte block in 4 ms
MODEL = tiny_model(1000)  # 1,000 KV bytes per token: a block of 4 tokens is 4,000 bytes
# a drive writing at 1e6 B/s and reading at 2e6 B/s, 500 us an operation
SLOW_DRIVE = StorageKvSettings(capacity_blocks=100, read_gbps=0.002, write_gbps=0.001, latency_us=500.0)


def _pool(params, hw=SLOW_LINK, count=1, role="mixed", name="p"):
    return PoolSpec(name, count, role, hw, MODEL, 1, params, LATENCY, "cluster")


def _pushed_to_storage(storage: StorageKvSettings | None):
    """A computes a 33-token prompt P (8 hashed blocks of 4 tokens) and stores them on the 8-block CPU tier;
    D's prompt Q (8 other blocks) evicts them from there (written back to the drive); B, without hashes,
    takes the whole 12-block GPU cache; C resends P: a miss on the GPU and on the CPU."""
    reqs = [
        Request(0, 0, 33, 2, block_hashes=tuple(range(100, 108))),
        Request(1, 40_000, 33, 2, block_hashes=tuple(range(200, 208))),
        Request(2, 50_000, 44, 2),
        Request(3, 100_000, 33, 2, block_hashes=tuple(range(100, 108))),
    ]
    params = engine(block_size=4, total_kv_blocks=12, cpu_kv_blocks=8, storage_kv=storage)
    return run(reqs, pools=[_pool(params)], check_every_event=True)


def test_a_block_evicted_from_the_cpu_is_written_back_and_loaded_in_the_hand_computed_time():
    sim = _pushed_to_storage(SLOW_DRIVE)
    inst = sim.cluster.instances[0]
    cpu, drive = inst.cpu, inst.cpu.storage
    table = sim.recorder.table().set_index("request_id")
    # D's prefill ends at 40,000 + 100 + 2 x 33 = 40,166 us; storing Q evicts P from the CPU tier, and P is
    # written in one operation: 500 + 8 x 4,000 B / 1e6 B/s = 32,500 us, readable from 72,666 us
    # C (100,000 us) misses on the GPU and the CPU (which holds Q): P is read from the drive, 500 + 8 x 4,000 /
    # 2e6 = 16,500 us, then crosses the host link, 8 x 4,000 / 1e6 = 32,000 us: it lands at 148,500 us
    assert (drive.loads, drive.hit_blocks, drive.load_us) == (1, 8, 48_500)
    assert cpu.hit_blocks == 0  # nothing came from the CPU tier
    c = table.loc[3]
    assert c["queue_ms"] == 48.5 and c["cached_tokens"] == 32
    assert c["ttft_ms"] == pytest.approx(48.602)  # then one step computes its last token: 100 + 2 x 1 us
    # C's first step offers P to the CPU tier again: it evicts Q, written back in its turn
    assert cpu.evicted_blocks == 16 and drive.written_blocks == 16 and drive.writes == 2
    assert drive.write_us == 2 * 32_500 and drive.dropped_blocks == 0
    assert inst.stats.prefill_tokens == 33 + 33 + 44 + 1
    assert (table["status"] == "completed").all() and not inst.loading and not drive.pinned and not cpu.pinned


def test_without_the_drive_the_same_requests_recompute_the_prefix():
    sim = _pushed_to_storage(None)
    inst = sim.cluster.instances[0]
    assert inst.cpu.storage is None and inst.stats.prefill_tokens == 33 + 33 + 44 + 33
    assert sim.recorder.table().set_index("request_id").loc[3, "cached_tokens"] == 0


def test_an_operation_is_its_latency_plus_its_bytes_at_the_rate_rounded_half_up_as_the_cpu_tier_rounds():
    drive = StorageKvTier(10, 3.0, 2e6, 1e6, 0.0)  # 3 bytes a block: 1.5 us a block read, 3 us written
    cpu = CpuKvTier(10, 3.0, 2e6)
    for n in range(1, 6):
        assert drive.op_us(n, drive.read_bytes_per_s) == cpu.transfer_us(n)  # 1.5 -> 2, 3, 4.5 -> 5, ...
    assert [drive.op_us(n, drive.read_bytes_per_s) for n in (1, 3)] == [2, 5]
    slow = StorageKvTier(10, 4000.0, 2e6, 1e6, 500.25)
    assert slow.op_us(8, slow.read_bytes_per_s) == 16_500  # 500.25 + 16,000 rounds down
    assert slow.op_us(8, slow.write_bytes_per_s) == 32_500


def test_writes_queue_on_the_drive_and_a_block_is_readable_only_once_written():
    drive = StorageKvTier(10, 1000.0, 1e9, 1e6, 10.0)  # a block written in 1,000 us + 10 per operation
    drive.write_back(["a", "b"], 0)  # 0 .. 2,010
    drive.write_back(["c"], 100)  # after it: 2,010 .. 3,020
    assert dict(drive.blocks) == {"a": 2010, "b": 2010, "c": 3020}
    assert drive.lookup(["a", "b", "c"], 0, 3, 2009) == 0
    assert drive.lookup(["a", "b", "c"], 0, 3, 2010) == 2
    assert drive.lookup(["a", "b", "c"], 0, 3, 3020) == 3
    assert drive.next_write_landing(0) == 2010 and drive.next_write_landing(2010) == 3020
    assert drive.next_write_landing(3020) is None


def test_lru_eviction_skips_blocks_in_flight_and_a_write_without_room_is_dropped():
    drive = StorageKvTier(3, 1.0, 1e9, 1e9, 0.0)  # a write takes no time: readable at once
    drive.write_back(["a", "b", "c"], 0)
    drive.lookup(["a"], 0, 1, 0)  # a is used: b is now the least recently used
    drive.write_back(["d"], 1)
    assert list(drive.blocks) == ["c", "a", "d"] and drive.evicted_blocks == 1
    drive.write_back(["a"], 2)  # held already: not written again, but the most recent
    assert list(drive.blocks) == ["c", "d", "a"] and drive.written_blocks == 4
    drive.start_read(["c", "d"], 0, 2, 2)  # c and d pinned by a load; a is the one evictable block
    drive.write_back(["e", "f"], 3)  # two to make room for, one evictable: dropped, nothing evicted
    assert drive.dropped_blocks == 2 and list(drive.blocks) == ["c", "d", "a"]
    drive.check("t", 2)
    slow = StorageKvTier(2, 1.0, 1e9, 1.0, 0.0)  # a write takes a second
    slow.write_back(["a", "b"], 0)
    slow.write_back(["c"], 1)  # both blocks are being written: not evictable, the write drops
    assert slow.dropped_blocks == 1 and slow.written_blocks == 2


def _shared_prefix_requests(seed: int, n: int, gap_us: float, pmax: int, dmax: int, bs: int, groups: int = 3):
    """Requests whose prompts open with one of ``groups`` prefix chains, a fifth of them without hashes."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_us, n)).astype(int)
    out = []
    for i in range(n):
        p = int(rng.integers(1, pmax + 1))
        group = int(rng.integers(0, groups))
        hashes = None if rng.random() < 0.2 else tuple(group * 10_000 + k for k in range(p // bs))
        out.append(Request(i, int(t[i]), p, int(rng.integers(1, dmax + 1)), block_hashes=hashes))
    return out


configs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10_000),
        "n": st.integers(10, 80),
        "gap_us": st.sampled_from([50.0, 500.0, 5_000.0]),
        "pmax": st.integers(8, 80),
        "dmax": st.integers(1, 30),
        "bs": st.sampled_from([1, 2, 4, 8]),
        "groups": st.sampled_from([3, 12, 40]),
        "gpu_tokens": st.integers(60, 240),  # the GPU cache, in tokens: tight enough to evict shared prefixes
        "cpu_share": st.sampled_from([0.25, 0.5, 1.0]),  # the CPU tier's size against the GPU cache's
        "drive_share": st.sampled_from([0.1, 1.0, 8.0]),  # the drive's against the GPU cache's
        "link_gbps": st.sampled_from([0.01, 1.0]),
        "drive_gbps": st.sampled_from([0.001, 0.01, 1.0]),  # 4 tokens of 1,000 bytes in 4,000, 400 or 4 us
        "latency_us": st.sampled_from([0.0, 80.0, 5_000.0]),
        "seqs": st.integers(1, 8),
        "tokens_extra": st.integers(0, 60),
        "chunked": st.booleans(),
        "reserve_full": st.booleans(),
        "instances": st.integers(1, 2),
    }
)


def _random_engine(c):
    """The engine, its drive and the hardware (its host link) a drawn config describes."""
    blocks = c["gpu_tokens"] // c["bs"]
    drive = StorageKvSettings(max(1, int(c["drive_share"] * blocks)), c["drive_gbps"], c["drive_gbps"] / 2,
                              c["latency_us"])
    params = engine(
        max_num_seqs=c["seqs"],
        max_num_batched_tokens=max(c["seqs"], 8) + c["tokens_extra"] + (0 if c["chunked"] else 80),
        block_size=c["bs"],
        total_kv_blocks=blocks,
        enable_chunked_prefill=c["chunked"],
        scheduler_reserve_full_isl=c["reserve_full"],
        cpu_kv_blocks=max(1, int(c["cpu_share"] * blocks)),
        storage_kv=drive,
    )
    hw = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=c["link_gbps"])
    return [_pool(params, hw=hw, count=c["instances"])]


def _random_requests(c):
    return _shared_prefix_requests(c["seed"], c["n"], c["gap_us"], c["pmax"], c["dmax"], c["bs"], c["groups"])


class _Witness:
    """Records, apart from the tiers' own state, when each block left each engine's CPU tier and when its
    write on that engine's drive completes, and checks every read against them (causality). Engines share
    block hashes (the same prefix on two engines), so the records are by drive."""

    def __init__(self, monkeypatch):
        self.evicted: dict = {}  # (drive, hash) -> the first time the drive's CPU tier evicted it
        self.written: dict = {}  # (drive, hash) -> when its latest write completes
        self.reads = 0
        witness = self
        evict, write_back, start_read = CpuKvTier._evict, StorageKvTier.write_back, StorageKvTier.start_read

        def _evict(tier, n, now):
            before = set(tier.blocks)
            done = evict(tier, n, now)
            for h in before - set(tier.blocks):
                witness.evicted.setdefault((id(tier.storage), h), now)
            return done

        def _write_back(drive, victims, now):
            held = {h for h in victims if h in drive.blocks}
            write_back(drive, victims, now)
            for h in victims:
                if h in drive.blocks and h not in held:
                    assert drive.blocks[h] >= now + drive.latency_us - 0.5  # a write takes its latency at least
                    witness.written[id(drive), h] = drive.blocks[h]

        def _start_read(drive, hashes, lo, hi, now):
            for h in hashes[lo:hi]:
                key = (id(drive), h)
                assert key in witness.written and witness.written[key] <= now, f"block {h!r} read before it was written"
                assert witness.evicted[key] <= witness.written[key]  # it passed through the CPU tier first
            witness.reads += hi - lo
            return start_read(drive, hashes, lo, hi, now)

        monkeypatch.setattr(CpuKvTier, "_evict", _evict)
        monkeypatch.setattr(StorageKvTier, "write_back", _write_back)
        monkeypatch.setattr(StorageKvTier, "start_read", _start_read)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(configs)
def test_blocks_are_conserved_on_three_tiers_and_a_block_read_from_the_drive_was_written_first(monkeypatch, c):
    """INV-32 (with INV-1, 2, 3, 12 and 15) after every event; causality against a separate record."""
    with monkeypatch.context() as patch:
        witness = _Witness(patch)
        reqs = _random_requests(c)
        sim = run(reqs, pools=_random_engine(c), check_every_event=True)
    table = sim.recorder.table()
    assert len(table) == len(reqs) and set(table["status"]) <= {"completed", "dropped"}
    assert witness.reads == sum(inst.cpu.storage.hit_blocks for inst in sim.cluster.instances)
    for inst in sim.cluster.instances:
        drive = inst.cpu.storage
        assert inst.kv.available() == inst.kv.total and not inst.loading and not drive.pinned
        assert len(drive.blocks) <= drive.total and drive.free + len(drive.blocks) == drive.total
        assert drive.written_blocks + drive.dropped_blocks <= inst.cpu.evicted_blocks  # only what the CPU evicted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_fast_forward_equals_stepping_with_a_storage_tier(c):
    """INV-8: a write landing on the drive during a decode run can change what the waiting head loads; the
    run is replanned at that boundary, as stepping one by one would see it."""
    fast = run(_random_requests(c), pools=_random_engine(c), fast_forward=True)
    slow = run(_random_requests(c), pools=_random_engine(c), fast_forward=False)
    pd.testing.assert_frame_equal(fast.recorder.table(), slow.recorder.table())
    for a, b in zip(fast.cluster.instances, slow.cluster.instances):
        x, y = a.cpu.storage, b.cpu.storage
        assert (x.written_blocks, x.hit_blocks, x.load_us, x.dropped_blocks) == (
            y.written_blocks, y.hit_blocks, y.load_us, y.dropped_blocks)


def test_the_drive_helps_when_the_shared_prefixes_outgrow_gpu_and_cpu():
    """Twelve prefix chains of up to 30 blocks on a 60-block GPU cache and a 60-block CPU tier: the drive
    (600 blocks, fast) holds what they cannot; prompts are recomputed less and the first token comes sooner."""
    reqs = lambda: _shared_prefix_requests(11, 400, 300.0, 120, 10, 4, groups=12)  # noqa: E731
    hw = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=1.0)  # a block in 4 us
    base = dict(block_size=4, total_kv_blocks=60, max_num_batched_tokens=128, cpu_kv_blocks=60)
    drive = StorageKvSettings(600, 1.0, 0.5, 20.0)
    off = run(reqs(), pools=[_pool(engine(**base), hw=hw)])
    on = run(reqs(), pools=[_pool(engine(**base, storage_kv=drive), hw=hw)], check_every_event=True)
    tier = on.cluster.instances[0].cpu.storage
    assert tier.hit_blocks > 0 and tier.dropped_blocks == 0
    assert on.cluster.instances[0].stats.prefill_tokens < off.cluster.instances[0].stats.prefill_tokens
    a, b = off.recorder.table(), on.recorder.table()
    assert b["cached_tokens"].sum() > a["cached_tokens"].sum()
    assert b["ttft_ms"].mean() < a["ttft_ms"].mean()
    assert (b["status"] == "completed").all()


def test_a_pd_cluster_with_drives_finishes_every_request_with_invariants_after_every_event():
    drive = StorageKvSettings(400, 0.5, 0.25, 50.0)
    prefill = engine(max_num_seqs=16, max_num_batched_tokens=256, block_size=16, total_kv_blocks=60,
                     cpu_kv_blocks=40, storage_kv=drive)
    decode = engine(max_num_seqs=64, max_num_batched_tokens=256, block_size=16, total_kv_blocks=80,
                    cpu_kv_blocks=30, storage_kv=drive)
    fast = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.1)
    pools = [
        _pool(prefill, hw=fast, count=2, role="prefill", name="prefill"),
        _pool(decode, hw=fast, count=1, role="decode", name="decode"),
    ]
    reqs = _shared_prefix_requests(3, 300, 300.0, 400, 150, 16, groups=12)
    sim = run(reqs, pools=pools, transfer_cfg=transfer(0.5, 50.0), check_every_event=True)
    assert (sim.recorder.table()["status"] == "completed").all()
    assert sum(inst.cpu.storage.hit_blocks for inst in sim.cluster.instances[:2]) > 0


TINY = ["workload.num_requests=60", "cluster.instances=2", "cluster.engine.cpu_kv_blocks=64"]
DRIVE = ["cluster.engine.storage_kv.capacity_blocks=4096", "cluster.engine.storage_kv.latency_us=100"]


def test_no_capacity_is_the_simulator_without_a_storage_tier():
    base = simulate(load_config(TINY))
    off = simulate(load_config([*TINY, "cluster.engine.storage_kv.read_gbps=3.0",
                                "cluster.engine.storage_kv.latency_us=5"]))  # speeds alone turn nothing on
    assert summary_json(off.summary) == summary_json(base.summary) and "storage_kv" not in off.summary
    pd.testing.assert_frame_equal(off.requests, base.requests)
    pd.testing.assert_frame_equal(off.instances, base.instances)
    assert not any(col.startswith("storage_") for col in off.instances.columns)


def test_a_run_with_a_drive_reports_hits_by_tier_and_bytes_and_is_deterministic():
    # 16 system prompts of 2,048 tokens (128 blocks each) against 700 GPU and 400 CPU blocks an engine
    cfg = ["workload.num_requests=120", "cluster.instances=2", "cluster.engine.cpu_kv_blocks=400", *DRIVE,
           "cluster.engine.total_kv_blocks=700", "cluster.engine.max_model_len=10240", "workload.prefix.groups=16"]
    one, two = simulate(load_config(cfg)), simulate(load_config(cfg))
    assert summary_json(one.summary) == summary_json(two.summary)
    pd.testing.assert_frame_equal(one.requests, two.requests)
    pd.testing.assert_frame_equal(one.instances, two.instances)
    section = one.summary["storage_kv"]
    assert section["blocks"] == 2 * 4096 and set(section["hit_rate_by_tier"]) == {"gpu", "cpu", "storage"}
    rates = section["hit_rate_by_tier"]
    assert rates["storage"] > 0 and section["gb_moved"]["storage_read"] > 0
    assert sum(rates.values()) == pytest.approx(one.summary["prefix_cache_hit_rate"], abs=2e-4)
    assert set(section["gb_moved"]) == {"cpu_stored", "cpu_loaded", "storage_written", "storage_read"}
    assert (one.instances["storage_kv_blocks"] == 4096).all()
    json.loads(summary_json(one.summary))


NO_BLOCKS = "cluster.engine.storage_kv.capacity_blocks=null"


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["cluster.engine.storage_kv.capacity_blocks=0"], "capacity_blocks", "integer >= 1"),
        ([NO_BLOCKS, "cluster.engine.storage_kv.capacity_gb=-1"], "capacity_gb", "GB > 0"),
        ([NO_BLOCKS, "cluster.engine.storage_kv.capacity_gb=1e-9"], "capacity_gb", "holds no KV block"),
        (["cluster.engine.storage_kv.capacity_gb=10"], "capacity_gb", "not both"),
        (["cluster.engine.storage_kv.read_gbps=0"], "read_gbps", "GB/s > 0"),
        (["cluster.engine.storage_kv.write_gbps=-2"], "write_gbps", "GB/s > 0"),
        (["cluster.engine.storage_kv.latency_us=-1"], "latency_us", ">= 0"),
        (["cluster.engine.storage_kv.latency_us=null"], "latency_us", "is required"),
        (["cluster.engine.cpu_kv_blocks=0"], "capacity_blocks", "needs cpu_kv_blocks > 0"),
    ],
)
def test_a_bad_storage_value_is_a_config_error_naming_the_key(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*TINY, *DRIVE, *overrides]))
    assert f"cluster.engine.storage_kv.{key}" in str(err.value) and words in str(err.value)


def test_a_pool_override_is_checked_too_and_the_cli_says_it_in_one_line(tmp_path):
    pool = ("cluster.pools=[{name: a, count: 1, hardware: H100, role: mixed, engine: {cpu_kv_blocks: 64,"
            " storage_kv: {capacity_blocks: 100, latency_us: 100, read_gbps: 0}}, latency: {}}]")
    proc = run_module("distsim", *TINY, pool, f"hydra.run.dir={tmp_path / 'run'}")
    assert_user_error(proc, 2, "cluster.pools[0].engine.storage_kv.read_gbps", "GB/s > 0")
