"""Signals are kept incrementally (O(1) per change): at any instant of a run they must equal the values
recomputed from scratch from the instances' own state. The KV use of a fast-forwarded decode run is the
delicate one: the board refreshes it only when a read finds that the run crossed a step boundary, so
the probes read at random instants, between and inside runs, with and without preemptions."""

from __future__ import annotations

from itertools import accumulate

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import engine, policy, run, shared_prefix_requests, signals, transfer

from distsim.instance.decode_set import ceil_div
from distsim.instance.latency.linear import LinearLatency
from distsim.instance.phase import Phase
from distsim.request import Request


def _steps_started_after_first(plan, now: int) -> int:
    """Steps of a run after its first that have started by ``now`` (each starts when the previous ends),
    from the run's durations, not from the plan's own helpers."""
    ends = list(accumulate(plan.durations_us, initial=plan.begin_us))[1 : plan.steps]
    return sum(1 for end in ends if end < now)


def kv_used_from_scratch(inst, now: int) -> int:
    """Blocks in use: the cache's referenced blocks plus every holder's private ones, each decoder's
    counted from its own length at the step running at ``now``."""
    used = inst.kv.referenced
    plan = inst.plan
    if plan.steps and plan.durations_us is not None:
        step = plan.start + _steps_started_after_first(plan, now)
    else:
        step = inst.step_index if plan.steps else inst.step_index - 1
    for req in inst.running.values():
        seq = req.seq
        if seq.phase == Phase.DECODE:
            used += ceil_div(req.prompt_tokens + seq.decode_offset + step, inst.bs) - seq.shared_blocks
        else:
            used += seq.private_blocks
    for _shared, private in inst.held.values():
        used += private
    for req in [*inst.reserved.values(), *inst.landed, *inst.loading.values()]:
        used += req.seq.private_blocks
    return used


def signals_from_scratch(instances, now: int) -> dict[str, np.ndarray]:
    waiting = [len(i.waiting) + len(i.landed) + len(i.loading) for i in instances]
    queued = [sum(r.prompt_tokens + r.generated for r in i.waiting) + len(i.landed) for i in instances]
    used = [kv_used_from_scratch(i, now) for i in instances]
    cached = np.array([i.stats.cached_tokens for i in instances], dtype=float)
    prompt = np.array([i.stats.prompt_tokens for i in instances], dtype=float)
    return {
        "queue_depth": np.array(waiting),
        "running": np.array([len(i.running) for i in instances]),
        "queued_tokens": np.array(queued),
        "kv_utilization": np.array(used) / np.array([i.kv.total for i in instances], dtype=float),
        "cache_hit_rate": np.divide(cached, prompt, out=np.zeros_like(cached), where=prompt > 0),
    }


@st.composite
def scenarios(draw):
    n = draw(st.integers(20, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    gaps = rng.exponential(draw(st.sampled_from([300, 1500, 6000])), n).astype(np.int64)
    prompts = rng.integers(4, 120, n)
    outputs = rng.integers(1, 90, n)
    prefixes = rng.integers(0, 3, n)  # three shared prompts, so the cache holds referenced blocks
    reqs = []
    for i, t in enumerate(np.cumsum(gaps)):
        blocks = ceil_div(int(prompts[i]), 4)
        hashes = tuple(int(prefixes[i]) * 1000 + b for b in range(min(blocks, 6))) + tuple(
            10**6 + i * 100 + b for b in range(max(0, blocks - 6))
        )
        reqs.append(Request(i, int(t), int(prompts[i]), int(outputs[i]), block_hashes=hashes))
    return dict(
        requests=reqs,
        instances=draw(st.integers(1, 4)),
        blocks=draw(st.integers(40, 200)),  # small caches preempt
        seqs=draw(st.integers(1, 12)),
        routing=draw(st.sampled_from(["least_kv", "weighted", "least_loaded"])),
        interval_ms=draw(st.sampled_from([0.0, 0.0, 2.0])),
        probe_seed=draw(st.integers(0, 2**32 - 1)),
    )


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_incremental_signals_equal_recomputed_at_random_instants(c):
    probe = np.random.default_rng(c["probe_seed"])
    seen = {"reads": 0}

    def check(sim, now):
        if probe.random() > 0.3:
            return  # read at a random subset of instants, so the board's catch-up spans varying gaps
        board = sim.cluster.board
        expected = signals_from_scratch(board.instances, now)
        for name, want in expected.items():
            got = board.current(name, now)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"{name} at t={now}us")
        seen["reads"] += 1

    params = engine(max_num_seqs=c["seqs"], max_num_batched_tokens=64, block_size=4, total_kv_blocks=c["blocks"])
    sim = run(
        c["requests"], params, LinearLatency(100.0, 2.0, 5.0), instances=c["instances"],
        policy_cfg=policy(c["routing"]), signals_cfg=signals(c["interval_ms"]), after_event=check,
    )
    assert sim.cluster.board.pushed  # the incremental bookkeeping is what was checked
    assert seen["reads"] > 0


def test_a_long_decode_run_is_read_mid_run_at_a_cost_bounded_by_its_steps(monkeypatch):
    """One instance decodes a long run while arrivals, routed by KV use, read it at every event: the
    reads see its blocks grow step by step, and the board recomputes a run's value no more often than
    the run crosses a step boundary (not once per read, which cost O(instances) per decision)."""
    from distsim.instance.instance import Instance

    calls = {"n": 0}
    original = Instance.run_blocks_at

    def counted(self, now):
        calls["n"] += 1
        return original(self, now)

    monkeypatch.setattr(Instance, "run_blocks_at", counted)
    reqs = [Request(0, 0, 8, 400)] + [Request(i, 5_000 + i * 997, 8, 2) for i in range(1, 300)]
    seen = []

    def check(sim, now):
        long = sim.cluster.instances[reqs[0].instance]  # the instance serving the long request
        if long.plan.durations_us is not None:
            seen.append(round(sim.cluster.board.current("kv_utilization", now)[long.slot] * long.kv.total))
            assert seen[-1] == kv_used_from_scratch(long, now)

    sim = run(reqs, engine(total_kv_blocks=400), instances=2, routing="least_kv", after_event=check)
    assert len(set(seen)) > 10 and seen == sorted(seen)  # KV use grew inside the run as its steps started
    steps = sum(inst.stats.steps for inst in sim.cluster.instances)
    reads = len(seen)
    assert calls["n"] <= steps + sim.loop.events  # one per step boundary crossed, plus one per run planned
    assert calls["n"] < reads  # far fewer than the reads


def _pd_pools(async_scheduling: bool):
    from simkit import FAKE_HW, tiny_model

    from distsim.cluster.pools import PoolSpec

    model, latency = tiny_model(1000), LinearLatency(100.0, 2.0, 5.0)
    prefill = engine(max_num_seqs=8, max_num_batched_tokens=128, block_size=4, total_kv_blocks=300,
                     async_scheduling=async_scheduling)
    decode = engine(max_num_seqs=16, max_num_batched_tokens=128, block_size=4, total_kv_blocks=90,
                    async_scheduling=async_scheduling)
    return [PoolSpec("prefill", 2, "prefill", FAKE_HW, model, 1, prefill, latency, "cluster.pools[0]"),
            PoolSpec("decode", 2, "decode", FAKE_HW, model, 1, decode, latency, "cluster.pools[1]")]


ROUTED_CASES = {  # name: (engine keywords or "pd", routing, refresh interval ms)
    "preempting": (dict(max_num_seqs=12, total_kv_blocks=70), "weighted", 0.0),
    "preempting_async": (dict(max_num_seqs=12, total_kv_blocks=70, async_scheduling=True), "weighted", 0.0),
    "roomy_async_least_kv": (dict(max_num_seqs=24, total_kv_blocks=600, async_scheduling=True), "least_kv", 0.0),
    "one_decoder_at_a_time": (dict(max_num_seqs=1, total_kv_blocks=200), "least_kv", 0.0),
    "cpu_tier": (dict(max_num_seqs=10, total_kv_blocks=60, cpu_kv_blocks=200), "weighted", 0.0),
    "scraped": (dict(max_num_seqs=12, total_kv_blocks=80, async_scheduling=True), "weighted", 2.0),
    "pd": ("pd", "weighted", 0.0),
    "pd_async": ("pd_async", "least_kv", 0.0),
}


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("case", sorted(ROUTED_CASES))
def test_kv_use_read_at_every_routing_decision_equals_recomputing_every_run(case, seed, monkeypatch):
    """At every routing decision (before the router reads it), the board's KV use, kept by following each
    run only when its value changes, equals the value recomputed from every instance's state and its run's
    step times: P/D, preemptions, the CPU tier, async scheduling, scraped signals."""
    from distsim.cluster.cluster import Cluster

    kw, routing, interval = ROUTED_CASES[case]
    decisions = {"n": 0, "in_runs": 0}
    original = Cluster._route

    def checked(self, req, now, router, view, stage):
        board = self.board
        want = [kv_used_from_scratch(inst, now) for inst in board.instances]
        got = board.current("kv_utilization", now) * board.kv_total
        assert np.array_equal(np.rint(got).astype(np.int64), want), f"{case} at t={now}us ({stage})"
        decisions["n"] += 1
        decisions["in_runs"] += sum(inst.plan.steps > 1 and inst.plan.ends_us is not None for inst in board.instances)
        return original(self, req, now, router, view, stage)

    monkeypatch.setattr(Cluster, "_route", checked)
    reqs = shared_prefix_requests(seed, 160, 400.0, (4, 160), 5, (1, 120))
    sigs = signals(interval)
    if isinstance(kw, str):
        sim = run(reqs, pools=_pd_pools(kw == "pd_async"), policy_cfg=policy(routing), signals_cfg=sigs,
                  transfer_cfg=transfer(0.5, 50.0))
    else:
        sim = run(reqs, engine(block_size=4, **kw), instances=3, policy_cfg=policy(routing), signals_cfg=sigs)
    assert decisions["n"] >= len(reqs) and decisions["in_runs"] > 20  # decisions were made inside runs
    if case.startswith("preempting"):
        assert sum(inst.stats.preemptions for inst in sim.cluster.instances) > 0


@settings(max_examples=25, deadline=None)
@given(scenarios(), st.floats(0.0, 1.0))
def test_kv_use_first_read_late_follows_the_runs_already_in_flight(c, start_share):
    """A policy that reads other signals live leaves the board noting runs only; KV use read for the first
    time at a random instant, and at every event after it, equals the value recomputed from scratch."""
    last = int(c["requests"][-1].arrival_us)
    first_read = int(start_share * last)

    def check(sim, now):
        if now < first_read:
            return
        board = sim.cluster.board
        want = [kv_used_from_scratch(inst, now) for inst in board.instances]
        got = board.current("kv_utilization", now) * board.kv_total
        assert np.array_equal(np.rint(got).astype(np.int64), want), f"t={now}us"

    params = engine(max_num_seqs=c["seqs"], max_num_batched_tokens=64, block_size=4, total_kv_blocks=c["blocks"])
    sim = run(c["requests"], params, LinearLatency(100.0, 2.0, 5.0), instances=c["instances"],
              policy_cfg=policy("least_loaded"), after_event=check)
    assert sim.cluster.board.pushed


def test_a_run_is_recomputed_only_where_a_step_takes_a_block(monkeypatch):
    """A lone decoder takes a block every 4th step (block size 4) while reads come at about every step:
    the board recomputes its run's KV use once per run planned and once per block taken, not at every
    step boundary a read crossed."""
    from distsim.instance.instance import Instance

    calls: dict[int, int] = {}
    original = Instance.run_blocks_at

    def counted(self, now):
        calls[self.index] = calls.get(self.index, 0) + 1
        return original(self, now)

    monkeypatch.setattr(Instance, "run_blocks_at", counted)
    reqs = [Request(0, 0, 8, 400)] + [Request(i, 1_000 + i * 97, 8, 1) for i in range(1, 400)]
    seen = []

    def check(sim, now):
        long = sim.cluster.instances[reqs[0].instance]
        if long.plan.ends_us is not None and 0 in long.running:
            seen.append(round(sim.cluster.board.current("kv_utilization", now)[long.slot] * long.kv.total))
            assert seen[-1] == kv_used_from_scratch(long, now)

    sim = run(reqs, engine(max_num_seqs=1, total_kv_blocks=400), instances=2, routing="least_kv", after_event=check)
    long = sim.cluster.instances[reqs[0].instance]
    runs = len(long.stats.itl_run_counts)
    assert len(seen) > 300 and len(set(seen)) > 90 and seen == sorted(seen)
    assert calls[long.index] <= runs + 400 // 4 + 1  # runs planned, plus the blocks the long request takes
    assert long.stats.steps > 3 * calls[long.index]
