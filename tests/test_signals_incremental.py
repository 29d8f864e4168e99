"""Signals are kept incrementally (O(1) per change): at any instant of a run they must equal the values
recomputed from scratch from the instances' own state. The KV use of a fast-forwarded decode run is the
delicate one: the board refreshes it only when a read finds that the run crossed a step boundary, so
the probes read at random instants, between and inside runs, with and without preemptions."""

from __future__ import annotations

from itertools import accumulate

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import engine, policy, run, signals

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
