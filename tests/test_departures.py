"""The one departure event (distsim.instance.departure) and the cluster's record listeners: every way a
request leaves an engine is told once, the owning cluster first, and an observer subscribed to the lists
changes nothing in the results."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from simkit import engine, run
from test_hedging import LATENCY, bursty, hedge_policy
from test_pd_handoff import TRANSFER, _overload, _pools

from distsim.instance.departure import Departure


def _listen(heard: list, recorded: list):
    """Subscribe to every instance's departures and the cluster's records, after the owners."""

    def subscribe(sim) -> None:
        for inst in sim.cluster.instances:
            def departed(req, now, how, inst=inst):
                # the cluster heard first: a finished request is recorded before any observer hears of it
                heard.append((inst.index, req.request_id, how, len(sim.recorder.records)))
            inst.departure_listeners.append(departed)
        sim.cluster.record_listeners.append(lambda req: recorded.append(req.request_id))

    return subscribe


def test_pd_requests_are_released_on_their_prefill_engine_and_finish_on_their_decode_engine():
    heard, recorded = [], []
    sim = run(_overload(1, 200), pools=_pools(400), transfer_cfg=TRANSFER, on_built=_listen(heard, recorded))
    plain = run(_overload(1, 200), pools=_pools(400), transfer_cfg=TRANSFER)
    pd.testing.assert_frame_equal(sim.recorder.table(), plain.recorder.table())
    table = sim.recorder.table().set_index("request_id")
    assert (table["status"] == "completed").all()
    kinds = Counter(how for _, _, how, _ in heard)
    assert kinds == {Departure.RELEASED: len(table), Departure.FINISHED: len(table)}
    for index, rid, how, _ in heard:
        where = "prefill_instance" if how is Departure.RELEASED else "instance"
        assert table.loc[rid, where] == index
    assert sorted(recorded) == sorted(table.index) and len(recorded) == len(set(recorded))
    assert all(n >= 1 for _, _, how, n in heard if how is Departure.FINISHED)


def test_hedged_copies_let_go_are_told_as_aborted_once_each():
    heard, recorded = [], []
    params = engine(max_num_batched_tokens=256, total_kv_blocks=400)
    policy = hedge_policy(delay_ms=0.5, max_copies=3)
    sim = run(bursty(200, seed=4), params, LATENCY, instances=3, policy_cfg=policy, on_built=_listen(heard, recorded))
    plain = run(bursty(200, seed=4), params, LATENCY, instances=3, policy_cfg=policy)
    pd.testing.assert_frame_equal(sim.recorder.table(), plain.recorder.table())
    aborted = [rid for _, rid, how, _ in heard if how is Departure.ABORTED]
    assert aborted and len(aborted) == len(set(aborted))
    assert len(aborted) <= sim.cluster.hedger.cancelled  # the rest were cancelled on their way (never arrived)
    left = Counter(rid for _, rid, _, _ in heard)
    assert max(left.values()) == 1  # one way out per copy
    assert sorted(recorded) == sorted(sim.recorder.table()["request_id"])
