"""The weighted router reads KV use as a bound (the value as last brought up to date, at most the true one)
and makes exact only the candidates that could win. Its decisions, its random tie-breaks and the scores
it reports must be those of scoring every candidate exactly: checked at every decision of runs whose
instances sit inside fast-forwarded decode runs, so the bounds are loose where it matters."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import engine, policy, run, shared_prefix_requests, transfer

from distsim.policies.choice import pick_max
from distsim.policies.weighted import Weighted


def _pd_pools() -> list:
    """A prefill pool and a decode pool: each router's candidates are part of the board's instances."""
    from simkit import FAKE_HW, tiny_model

    from distsim.cluster.pools import PoolSpec
    from distsim.instance.latency.linear import LinearLatency

    model, latency = tiny_model(1000), LinearLatency(100.0, 2.0, 5.0)
    prefill = engine(max_num_seqs=8, max_num_batched_tokens=128, block_size=4, total_kv_blocks=300)
    decode = engine(max_num_seqs=16, max_num_batched_tokens=128, block_size=4, total_kv_blocks=200)
    return [PoolSpec("prefill", 2, "prefill", FAKE_HW, model, 1, prefill, latency, "cluster.pools[0]"),
            PoolSpec("decode", 4, "decode", FAKE_HW, model, 1, decode, latency, "cluster.pools[1]")]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("scorers", [None, {"kv_utilization": 1.0}, {"kv_utilization": 2.0, "queue_depth": 1.0}, "pd"])
def test_bounded_kv_use_decides_and_reports_as_exact_scores_do(seed, scorers, monkeypatch):
    original = Weighted.route
    seen = {"calls": 0, "decisions": 0, "loose": 0, "ties": 0}

    def checked(self, req, view):
        seen["calls"] += 1
        if seen["calls"] % 3:
            return original(self, req, view)  # unchecked: the exact check below brings every run up to date
        rng = self.ctx.rng
        state = rng.bit_generator.state
        seen["loose"] += view.kv_loose_positions().size > 0
        choice = original(self, req, view)
        reported = self.last_scores.copy()  # makes the remaining bounds exact (a trace reads it so)
        # the exact totals, from every scorer's exact scores, summed as the router sums them
        total = None
        for scorer, w in self.scorers:
            score = scorer.score(req, view)
            total = np.multiply(score, w, dtype=np.float64) if total is None else total + w * score
        replay = np.random.Generator(type(rng.bit_generator)())
        replay.bit_generator.state = state
        assert choice == pick_max(total, replay)
        assert replay.bit_generator.state == rng.bit_generator.state  # the same draws, or none
        assert np.array_equal(reported, total)
        seen["decisions"] += 1
        seen["ties"] += int((total == total.max()).sum() > 1)
        return choice

    monkeypatch.setattr(Weighted, "route", checked)
    params = engine(max_num_seqs=16, max_num_batched_tokens=64, block_size=4, total_kv_blocks=400)
    reqs = shared_prefix_requests(seed, 300, 150.0, (8, 120), 6, (20, 200))
    if scorers == "pd":  # two routers, each over a pool: candidate positions are not board slots
        run(reqs, pools=_pd_pools(), policy_cfg=policy("weighted"), transfer_cfg=transfer(0.5, 50.0))
    else:
        r = {"r_scorers": scorers} if scorers else {}
        run(reqs, params, instances=6, policy_cfg=policy("weighted", **r))
    assert seen["calls"] == (600 if scorers == "pd" else 300)
    assert seen["loose"] > 30  # decisions were made while runs had taken blocks since last brought up to date
    assert seen["ties"] > 0


def test_a_decision_brings_up_to_date_far_fewer_runs_than_a_full_read(monkeypatch):
    """Bringing every run up to date at every decision cost a recomputation per block taken on the whole
    fleet (so more per request the lighter the load); the bound brings up to date the candidates that
    could win, and the runs stay exact where the router asks."""
    from distsim.instance.instance import Instance

    calls = {"n": 0}
    original = Instance.run_blocks_at

    def counted(self, now):
        calls["n"] += 1
        return original(self, now)

    monkeypatch.setattr(Instance, "run_blocks_at", counted)
    params = engine(max_num_seqs=16, max_num_batched_tokens=64, block_size=4, total_kv_blocks=400)
    reqs = shared_prefix_requests(3, 300, 150.0, (8, 120), 6, (20, 200))
    run(reqs, params, instances=6, policy_cfg=policy("least_kv"))
    full = calls["n"]
    calls["n"] = 0
    run(reqs, params, instances=6, policy_cfg=policy("weighted", r_scorers={"kv_utilization": 1.0}))
    assert calls["n"] * 2 < full
