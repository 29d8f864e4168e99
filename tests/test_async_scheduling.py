"""vLLM's async scheduling (``cluster.engine.async_scheduling``, distsim/instance/scheduler.py): a request
that reaches a busy engine is first scheduled one step later than without it; an idle engine, or one whose
next step would run nothing else, takes it at once; fast-forwarded decode runs give exactly the results of
stepping one by one; the KV and queue invariants hold after every event."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from simkit import engine, run
from test_instance_invariants import _params, _requests, configs

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.request import Request

TINY = ["workload.num_requests=40", "workload.arrival.rate_rps=20", "cluster.instances=1"]


def _first_tokens(reqs: list[Request], on: bool, **kw) -> dict[int, int]:
    run(reqs, engine(async_scheduling=on), **kw)  # LinearLatency(100, 2, 5): 100 us + 2 a prompt token + 5 a decoder
    return {r.request_id: r.first_token_us for r in reqs}


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_request_reaching_a_busy_engine_waits_one_step_more(fast_forward):
    # A: prefill 0-120, then decode steps of 105 us (120-225, 225-330, ...); B arrives at 150, mid-step
    reqs = lambda: [Request(0, 0, 10, 50), Request(1, 150, 10, 2)]  # noqa: E731
    sync = _first_tokens(reqs(), False, fast_forward=fast_forward)
    on = _first_tokens(reqs(), True, fast_forward=fast_forward)
    # without: admitted at 225, its step (A's token and its 10 prompt tokens) 125 us: first token at 350
    assert sync == {0: 120, 1: 350}
    # with: step 225-330 was scheduled when it began (120), before B came: admitted at 330, first token 455
    assert on == {0: 120, 1: 455}


def test_an_idle_engine_schedules_at_once():
    assert _first_tokens([Request(0, 150, 10, 2)], True) == {0: 270}  # 150 + 100 + 2 * 10
    # A's one-token request ends at 120 while B (arrived at 60) waits: the next step would run nothing else
    reqs = lambda: [Request(0, 0, 10, 1), Request(1, 60, 10, 2)]  # noqa: E731
    assert _first_tokens(reqs(), True) == _first_tokens(reqs(), False) == {0: 120, 1: 240}


@pytest.mark.parametrize("scheduler", ["priority", "shortest_prompt"])
def test_a_late_request_does_not_block_a_visible_one_in_an_ordered_queue(scheduler):
    # A decodes; B (long prompt) arrives mid-step 2; C (short prompt) arrives during the next step: when the
    # step after it is planned C is not yet visible, B goes in; with shortest_prompt C would otherwise lead
    reqs = [Request(0, 0, 10, 50), Request(1, 150, 30, 2), Request(2, 250, 5, 2)]
    run(reqs, engine(async_scheduling=True, scheduler=scheduler, max_num_batched_tokens=64))
    first = {r.request_id: r.first_token_us for r in reqs}
    assert first[1] < first[2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_fast_forward_equals_stepping_one_by_one_under_async(c):
    params = replace(_params(c), async_scheduling=True)
    a = run(_requests(c), params, instances=c["instances"], fast_forward=True, check_every_event=True)
    b = run(_requests(c), params, instances=c["instances"], fast_forward=False, check_every_event=True)
    pd.testing.assert_frame_equal(a.recorder.table(), b.recorder.table())
    for ia, ib in zip(a.cluster.instances, b.cluster.instances):
        assert (ia.stats.busy_us, ia.stats.steps, ia.stats.decode_tokens, ia.stats.peak_used_blocks) == (
            ib.stats.busy_us, ib.stats.steps, ib.stats.decode_tokens, ib.stats.peak_used_blocks)
        assert ia.kv.used() == 0 and not ia.running and not ia.waiting


FEATURES = {  # engine settings beside async scheduling: queue orders, windowed batching, a CPU KV tier
    "fcfs": {},
    "priority": {"scheduler": "priority"},
    "shortest_prompt": {"scheduler": "shortest_prompt"},
    "windowed batching": {"prefill_batch_min": 3, "prefill_batch_window_us": 400},
    "cpu tier": {"cpu_kv_blocks": 300},
    "few blocks (preemptions)": {"total_kv_blocks": 45},
}


@pytest.mark.parametrize("feature", FEATURES)
def test_invariants_hold_after_every_event_and_async_only_delays(feature):
    c = {"seed": 7, "n": 120, "rate": 5e-3, "pmax": 90, "dmax": 60, "bs": 4, "blocks": 120, "seqs": 6,
         "tokens_extra": 30, "chunked": True, "caching": True, "share": 0.5, "instances": 2}

    def table(on: bool, ff: bool) -> pd.DataFrame:
        params = replace(_params(c), **FEATURES[feature], async_scheduling=on)
        sim = run(_requests(c), params, instances=2, fast_forward=ff, check_every_event=True)
        assert sim.checks > 0
        return sim.recorder.table()

    on = table(True, True)
    pd.testing.assert_frame_equal(on, table(True, False))
    assert (on["status"] == "completed").all()
    assert on["ttft_ms"].mean() > table(False, True)["ttft_ms"].mean()


def test_pd_under_async_scheduling_equals_stepping_one_by_one():
    # P/D: prompts on the prefill side wait as on a mixed engine; landed KVs join the decoders at the next
    # boundary (not delayed: the simplification distsim/instance/scheduler.py states)
    from test_pd_handoff import TRANSFER, _overload, _pools

    def pools():
        return [replace(p, engine=replace(p.engine, async_scheduling=True)) for p in _pools(80)]

    a = run(_overload(4, 300), pools=pools(), transfer_cfg=TRANSFER, fast_forward=True, check_every_event=True)
    b = run(_overload(4, 300), pools=pools(), transfer_cfg=TRANSFER, fast_forward=False, check_every_event=True)
    pd.testing.assert_frame_equal(a.recorder.table(), b.recorder.table())


def test_async_scheduling_is_the_default_deterministic_and_changes_results_only_when_on():
    cfg = [*TINY, "cluster.engine.async_scheduling=true"]
    a, b = simulate(load_config(cfg)).requests, simulate(load_config(cfg)).requests
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, simulate(load_config(TINY)).requests)  # on by default, as in vLLM 0.15 and 0.19
    off = simulate(load_config([*TINY, "cluster.engine.async_scheduling=false"])).requests
    assert (a["output_tokens"] == off["output_tokens"]).all()
    # which way TTFT moves depends on the model: a token comes a step later, but the host time hidden
    # behind the GPU step shortens every step (distsim/instance/latency/serving.py)
    assert not np.array_equal(a["ttft_ms"].to_numpy(), off["ttft_ms"].to_numpy())


def test_a_bad_value_names_the_key():
    with pytest.raises(ConfigError, match=r"cluster\.engine\.async_scheduling"):
        simulate(load_config([*TINY, "cluster.engine.async_scheduling=maybe"]))
