"""Windowed prefill batching (cluster.engine.prefill_batch_min / prefill_batch_window_ms,
distsim/instance/batching.py): hand-computed schedules under the linear step model (a batch starts at its
window's end or when its min-th request arrives, whichever comes first, cutting a decode run at a step
boundary); a new prompt never starts before its batch closed, observed from outside after every event;
every invariant after every event, fast-forward equal to stepping, P/D and CPU-tier runs that complete;
the option off (or a no-op setting) changes nothing; bad values are one ConfigError naming the key."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from clikit import assert_user_error, run_module
from omegaconf import OmegaConf
from simkit import FAKE_HW, engine, run, tiny_model, transfer

from distsim import load_config, simulate
from distsim.cluster import settings as cluster_settings
from distsim.cluster.pools import PoolSpec
from distsim.config.schema import PolicyConfig
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request
from distsim.simulate import summary_json

LATENCY = LinearLatency(100.0, 2.0, 5.0)  # step = 100 us + 2 us per prefill token + 5 us per decoder
MODEL = tiny_model(1000)


def windowed(least: int | None, window_us: int, **kw):
    return engine(prefill_batch_min=least, prefill_batch_window_us=window_us, **kw)


def _ttft_us(sim) -> dict[int, int]:
    table = sim.recorder.table().set_index("request_id")
    return {rid: round(ms * 1000) for rid, ms in table["ttft_ms"].items()}


# ---------------------------------------------------------------- hand-computed schedules
@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_batch_short_of_its_min_starts_at_the_window_end(fast_forward):
    # min 3, window 1 ms: two 8-token prompts at 0 and 200 us wait until 1,000 us, then one step of
    # 100 + 2 x 16 = 132 us computes both (one output token each): first tokens at 1,132 us
    sim = run([Request(0, 0, 8, 1), Request(1, 200, 8, 1)], windowed(3, 1000), fast_forward=fast_forward,
              check_every_event=True)
    assert _ttft_us(sim) == {0: 1132, 1: 932}
    inst = sim.cluster.instances[0]
    assert inst.stats.steps == 1 and not inst.busy
    b = inst.batcher
    assert (b.batches, b.expired, b.held_requests, b.hold_us) == (1, 1, 2, 1000 + 800)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_batch_starts_when_its_min_th_request_arrives(fast_forward):
    # min 3, window 1 ms: the third prompt arrives at 300 us, before the window ends; one step of
    # 100 + 2 x 24 = 148 us; the window's wake-up is dropped, so the run ends at 448 us
    reqs = [Request(0, 0, 8, 1), Request(1, 100, 8, 1), Request(2, 300, 8, 1)]
    sim = run(reqs, windowed(3, 1000), fast_forward=fast_forward, check_every_event=True)
    assert _ttft_us(sim) == {0: 448, 1: 348, 2: 148}
    assert sim.loop.now == 448 and sim.cluster.instances[0].batcher.expired == 0


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_wake_up_cuts_a_decode_run_at_its_next_step_boundary(fast_forward):
    # min 2, window 1 ms. A and B (8 tokens each) arrive together at 0: the min is met, one prefill step
    # of 132 us; A then decodes 49 more tokens in steps of 100 + 5 = 105 us (B had one token). C arrives at
    # 500 us and is held: its window ends at 1,500 us, inside A's 14th decode step (132 + 14 x 105 =
    # 1,602 us), where it joins: a step of 100 + 2 x 8 + 5 = 121 us, first token at 1,723 us. A's last 34
    # tokens take 34 x 105 us more. Continuous batching would start C at 552 us (132 + 4 x 105).
    reqs = [Request(0, 0, 8, 50), Request(1, 0, 8, 1), Request(2, 500, 8, 1)]
    sim = run(reqs, windowed(2, 1000), fast_forward=fast_forward, check_every_event=True)
    table = sim.recorder.table().set_index("request_id")
    assert _ttft_us(sim) == {0: 132, 1: 132, 2: 1723 - 500}
    assert round(table.loc[0, "e2e_ms"] * 1000) == 1723 + 34 * 105
    plain = run([Request(0, 0, 8, 50), Request(1, 0, 8, 1), Request(2, 500, 8, 1)], fast_forward=fast_forward)
    assert _ttft_us(plain)[2] == 552 + 121 - 500


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_min_th_arrival_cuts_a_decode_run_at_its_next_step_boundary(fast_forward):
    # as above, but D (500 us) and E (700 us) make the min of 2: they join at the first boundary after
    # 700 us (132 + 6 x 105 = 762 us), a step of 100 + 2 x 16 + 5 = 137 us
    reqs = [Request(0, 0, 8, 50), Request(1, 0, 8, 1), Request(3, 500, 8, 1), Request(4, 700, 8, 1)]
    sim = run(reqs, windowed(2, 1000), fast_forward=fast_forward, check_every_event=True)
    ttft = _ttft_us(sim)
    assert (ttft[3], ttft[4]) == (899 - 500, 899 - 700)


def test_a_batch_whose_prompts_fill_the_token_budget_starts_at_once():
    # budget 64 tokens: two 40-token prompts fill it, so the second's arrival closes the batch (min 4)
    sim = run([Request(0, 0, 40, 1), Request(1, 100, 40, 1)], windowed(4, 10_000), check_every_event=True)
    assert sim.cluster.instances[0].batcher.expired == 0
    # at 100 us: 40 + 24 tokens in a step of 100 + 2 x 64 = 228 us (A's first token), then B's last 16 tokens
    # in 100 + 2 x 16 = 132 us
    assert _ttft_us(sim) == {0: 328, 1: 228 + 132}


# ---------------------------------------------------------------- a new prompt never starts before its batch closed
class BatchObserver:
    """After every event, from what the instances show (their queues, their running requests' first
    scheduling), that every new prompt starting prefill was released by the rule of distsim/instance/
    batching.py: at some instant while it waited, at least ``least`` new prompts waited, or the oldest had
    waited the window, or their prompts filled the token budget, or it queued behind requests its batch
    could not overtake (a closed batch or a recompute still waiting). Also checks every invariant."""

    def __init__(self, least: int, window_us: int, budget: int):
        self.least, self.window_us, self.budget = least, window_us, budget
        self.seen: dict[int, int] = {}  # request id -> when first seen queued (routing takes no time here)
        self.released: set[int] = set()
        self.started: set[int] = set()
        self.starts = 0

    def __call__(self, sim, now: int) -> None:
        sim.cluster.check_invariants()
        for inst in sim.cluster.instances:
            new = [r for r in inst.waiting if r.first_scheduled_us < 0]
            for r in new:
                self.seen.setdefault(r.request_id, now)
            started = [r for r in inst.running.values() if r.first_scheduled_us == now and r.request_id not in self.started]
            group = new + started
            behind = any(r.first_scheduled_us >= 0 or r.request_id in self.released for r in inst.waiting)
            if (
                behind
                or len(group) >= self.least
                or any(now - self.seen[r.request_id] >= self.window_us for r in group)
                or sum(r.prompt_tokens for r in group) >= self.budget
            ):
                self.released.update(r.request_id for r in group)
            for r in started:
                assert r.request_id in self.released, f"request {r.request_id} started at {now} before its batch closed"
                self.started.add(r.request_id)
                self.starts += 1


def _traffic(seed: int, n: int = 250, gap_us: float = 400.0, shared: bool = False) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_us, n)).astype(int)
    reqs = []
    for i in range(n):
        prompt = int(rng.integers(4, 90))
        hashes = tuple(range(7, 7 + prompt // 4)) if shared and rng.random() < 0.5 else None  # one shared prompt family
        reqs.append(Request(i, int(t[i]), prompt, int(rng.integers(1, 60)), block_hashes=hashes))
    return reqs


CASES = [  # (least, window_us, engine overrides)
    (4, 2_000, {}),
    (2, 300, {"max_num_seqs": 4}),
    (8, 5_000, {"total_kv_blocks": 40}),  # preemptions: recomputes queue ahead of a held batch
    (None, 1_500, {}),  # the window (and the budget) only
    (3, 1_000, {"enable_chunked_prefill": False, "max_num_batched_tokens": 128}),
]


@pytest.mark.parametrize("least, window_us, kw", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_no_new_prompt_starts_before_its_batch_closed_and_invariants_hold(least, window_us, kw, seed):
    params = windowed(least, window_us, **kw)
    probe = BatchObserver(least or 1 << 30, window_us, params.max_num_batched_tokens)
    sim = run(_traffic(seed, shared=True), params, instances=2, after_event=probe)
    table = sim.recorder.table()
    assert (table["status"] == "completed").all() and probe.starts == len(table)
    for inst in sim.cluster.instances:
        assert inst.kv.available() == inst.kv.total and not inst.batcher.held
        assert inst.batcher.held_requests > 0 and inst.batcher.batches > 0


@pytest.mark.parametrize("least, window_us, kw", CASES)
def test_fast_forward_equals_stepping_with_windowed_batching(least, window_us, kw):
    params = windowed(least, window_us, **kw)
    a = run(_traffic(5, shared=True), params, instances=2, fast_forward=True)
    b = run(_traffic(5, shared=True), params, instances=2, fast_forward=False)
    pd.testing.assert_frame_equal(a.recorder.table(), b.recorder.table())
    for ia, ib in zip(a.cluster.instances, b.cluster.instances):
        assert (ia.stats.busy_us, ia.stats.steps, ia.stats.peak_used_blocks) == (ib.stats.busy_us, ib.stats.steps, ib.stats.peak_used_blocks)
        assert (ia.batcher.batches, ia.batcher.expired, ia.batcher.hold_us) == (ib.batcher.batches, ib.batcher.expired, ib.batcher.hold_us)
    assert a.loop.events < b.loop.events


def test_windowed_batching_makes_fewer_fuller_prefill_steps_at_light_load():
    plain_reqs, held_reqs = _traffic(3, n=300, gap_us=800.0), _traffic(3, n=300, gap_us=800.0)
    kw = dict(max_num_seqs=32, max_num_batched_tokens=512, total_kv_blocks=4000)  # no preemptions
    plain = run(plain_reqs, engine(**kw))
    held = run(held_reqs, windowed(4, 3_000, **kw))
    # an admission: the new prompts one instance starts at one instant
    batches = [len({(r.instance, r.first_scheduled_us) for r in reqs}) for reqs in (plain_reqs, held_reqs)]
    assert batches[1] * 3 < batches[0]  # 84 against 284 admissions of 300 prompts
    mean_ttft = [sim.recorder.table()["ttft_ms"].mean() for sim in (plain, held)]
    assert mean_ttft[1] > mean_ttft[0]  # the wait costs TTFT at light load


# ---------------------------------------------------------------- P/D, the CPU KV tier
def test_a_pd_cluster_batching_its_prefill_pool_completes_with_invariants_after_every_event():
    prefill = windowed(4, 2_000, max_num_seqs=16, max_num_batched_tokens=256, block_size=16, total_kv_blocks=400)
    decode = windowed(4, 2_000, max_num_seqs=64, max_num_batched_tokens=256, block_size=16, total_kv_blocks=120)
    pools = [
        PoolSpec("prefill", 2, "prefill", FAKE_HW, MODEL, 1, prefill, LATENCY, "cluster.pools[0]"),
        PoolSpec("decode", 1, "decode", FAKE_HW, MODEL, 1, decode, LATENCY, "cluster.pools[1]"),
    ]
    probe = BatchObserver(4, 2_000, 256)
    sim = run(_traffic(2, n=300), pools=pools, transfer_cfg=transfer(0.5, 50.0), after_event=probe)
    table = sim.recorder.table()
    assert (table["status"] == "completed").all() and len(table) == 300
    p0, p1, dec = sim.cluster.instances
    assert p0.batcher.batches > 0 and p1.batcher.batches > 0
    assert dec.batcher.held_requests == 0  # landed KVs and decode-side recomputes are never held
    assert dec.stats.preemptions > 0  # recomputes on the decode side ran through its (unheld) queue
    ff_off = run(_traffic(2, n=300), pools=pools, transfer_cfg=transfer(0.5, 50.0), fast_forward=False)
    pd.testing.assert_frame_equal(table, ff_off.recorder.table())


def test_a_cpu_tier_run_completes_and_fast_forward_equals_stepping():
    slow_link = dataclasses.replace(FAKE_HW, host_link_gbps_per_dir=0.001)  # loads of milliseconds
    params = windowed(3, 1_500, total_kv_blocks=48, cpu_kv_blocks=400)
    pool = [PoolSpec("p", 2, "mixed", slow_link, MODEL, 1, params, LATENCY, "cluster")]
    probe = BatchObserver(3, 1_500, params.max_num_batched_tokens)
    sim = run(_traffic(4, shared=True), pools=pool, after_event=probe)
    table = sim.recorder.table()
    assert (table["status"] == "completed").all()
    assert sum(inst.cpu.loads for inst in sim.cluster.instances) > 0
    assert all(not inst.loading and not inst.cpu.pinned for inst in sim.cluster.instances)
    stepped = run(_traffic(4, shared=True), pools=pool, fast_forward=False)
    pd.testing.assert_frame_equal(table, stepped.recorder.table())


def test_hedge_copies_cancelled_while_held_leave_the_batch_and_every_invariant_holds():
    node = OmegaConf.structured(PolicyConfig)
    node.hedge.delay_ms, node.hedge.max_copies = 0.3, 3
    params = windowed(4, 2_000, max_num_seqs=6, max_num_batched_tokens=48, total_kv_blocks=60)
    probe = BatchObserver(4, 2_000, 48)
    sim = run(_traffic(7, n=200, gap_us=150.0, shared=True), params, instances=3, policy_cfg=cluster_settings.policy(node),
              after_event=probe)
    assert (sim.recorder.table()["status"] == "completed").all()
    copies = [c for g in sim.cluster.hedger.groups.values() for c in g.copies[1:]]
    assert sum(c.first_scheduled_us < 0 for c in copies) > 0  # copies cancelled while queued (held or not)
    assert all(inst.kv.available() == inst.kv.total and not inst.batcher.held for inst in sim.cluster.instances)


def test_a_horizon_leaves_held_requests_unfinished_and_counted_once():
    sim = run([Request(0, 0, 8, 1), Request(1, 200, 8, 1)], windowed(3, 1000), horizon_us=600, check_every_event=True)
    table = sim.recorder.table()
    assert list(table["status"]) == ["unfinished", "unfinished"]
    inst = sim.cluster.instances[0]
    assert len(inst.batcher.held) == 2 and not inst.busy and inst.stats.steps == 0


# ---------------------------------------------------------------- off, and settings that hold nothing
@pytest.mark.parametrize("least, window_us", [(None, 0), (1, 5_000), (6, 0)])
def test_settings_that_hold_nothing_are_continuous_batching(least, window_us):
    base = run(_traffic(6, shared=True), engine(), instances=2)
    same = run(_traffic(6, shared=True), windowed(least, window_us), instances=2)
    assert all(inst.batcher is None for inst in same.cluster.instances)
    pd.testing.assert_frame_equal(base.recorder.table(), same.recorder.table())
    assert base.loop.events == same.loop.events


TINY = ["workload.num_requests=80", "cluster.instances=2"]


def test_the_default_is_off_and_outputs_keep_their_columns():
    base = simulate(load_config(TINY))
    nulls = simulate(load_config([*TINY, "cluster.engine.prefill_batch_min=null", "cluster.engine.prefill_batch_window_ms=null"]))
    assert summary_json(nulls.summary) == summary_json(base.summary)
    assert not any(c.startswith("prefill_batch") for c in base.instances.columns)
    on = simulate(load_config([*TINY, "cluster.engine.prefill_batch_min=4", "cluster.engine.prefill_batch_window_ms=40"]))
    cols = on.instances[["prefill_batches", "prefill_batches_expired", "prefill_batch_held", "prefill_batch_hold_ms"]]
    # every instance closes batches; with async scheduling (the default) one of the two closes each at once
    # here (a prompt whose tokens fill the step), so the holding is asked of the cluster, not of each
    assert (cols["prefill_batches"] > 0).all() and (cols["prefill_batch_hold_ms"] > 0).any()
    assert (cols["prefill_batch_hold_ms"] <= 40.0).all() and on.summary["requests"]["completed"] == 80


def test_a_pool_may_batch_alone():
    pools = ("cluster.pools=[{name: a, count: 1, engine: {prefill_batch_min: 4, prefill_batch_window_ms: 30}},"
             " {name: b, count: 1}]")
    result = simulate(load_config([*TINY, pools]))
    assert list(result.instances["prefill_batch_held"] > 0) == [True, False]


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["cluster.engine.prefill_batch_window_ms=-1"], "prefill_batch_window_ms", "must be a finite number"),
        (["cluster.engine.prefill_batch_window_ms=inf"], "prefill_batch_window_ms", "must be a finite number"),
        (["cluster.engine.prefill_batch_min=0", "cluster.engine.prefill_batch_window_ms=5"], "prefill_batch_min", ">= 1"),
        (["cluster.engine.prefill_batch_min=4"], "prefill_batch_min", "needs prefill_batch_window_ms"),
        (
            ["cluster.engine.prefill_batch_min=300", "cluster.engine.prefill_batch_window_ms=5"],
            "prefill_batch_min",
            "must be <= max_num_seqs (256)",
        ),
    ],
)
def test_bad_values_are_a_config_error_naming_the_key(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*TINY, *overrides]))
    assert f"cluster.engine.{key}" in str(err.value) and words in str(err.value)


def test_a_bad_pool_override_is_one_line_naming_the_pool_key(tmp_path):
    pool = "cluster.pools=[{name: a, count: 1, engine: {prefill_batch_window_ms: -3}}]"
    proc = run_module("distsim", *TINY, pool, f"hydra.run.dir={tmp_path / 'run'}")
    assert_user_error(proc, 2, "cluster.pools[0].engine.prefill_batch_window_ms", "finite number")
