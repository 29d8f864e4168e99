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
                heard.append((inst.index, req.request_id, how, len(sim.recorder)))
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


def _drained_once(told: list):
    """Subscribe to the cluster's "run drained" event before and after its own timer drop: what the cluster
    holds when it is told, and the events pending on either side of the drop."""

    def subscribe(sim) -> None:
        cluster, loop = sim.cluster, sim.loop
        cluster.drained_listeners.insert(0, lambda: told.append(("before", loop.pending())))
        cluster.drained_listeners.append(lambda: told.append(
            ("after", loop.pending(), cluster.recorded, cluster.arrived, int(cluster.state.outstanding.sum()), loop.now)
        ))

    return subscribe


def test_the_run_drained_event_is_told_once_when_every_request_is_recorded_and_no_copy_is_left():
    told = []
    params = engine(max_num_batched_tokens=256, total_kv_blocks=400)
    policy = hedge_policy(delay_ms=50, max_copies=3)  # long enough that hedge timers are pending at the end
    sim = run(bursty(200, seed=4), params, LATENCY, instances=3, policy_cfg=policy, on_built=_drained_once(told))
    assert [t[0] for t in told] == ["before", "after"]  # once
    (_, pending_before), (_, pending_after, recorded, arrived, outstanding, now) = told
    assert recorded == arrived == 200 and outstanding == 0
    assert pending_before > pending_after  # the hedge timers went
    assert sim.loop.now == now  # and nothing ran after: no timer prolonged the run
    last = sim.recorder.table()["completion_ms"].max() * 1000
    assert now >= last - 1  # not before the last request's record (whole microseconds in the table)
