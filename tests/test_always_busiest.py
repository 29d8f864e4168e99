"""always_busiest, the pathological router: it sends each request to the most loaded instance, so a
fitness or ranking that cannot tell it from round robin is broken."""

from __future__ import annotations

from simkit import engine, run
from test_policies import FakeView, req, router

from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request


def test_always_busiest_picks_the_maximum_of_queue_running_and_transit():
    view = FakeView(4, queue=[3, 0, 2, 0], running=[1, 5, 0, 2], transit=[0, 0, 1, 0])
    # loads 4, 5, 3, 2
    assert router("always_busiest", 4).route(req(), view) == 1


def test_always_busiest_breaks_an_idle_fleets_tie_from_the_router_stream():
    picks = {router("always_busiest", 8, seed=s).route(req(), FakeView(8)) for s in range(20)}
    assert len(picks) > 1  # not always instance 0
    assert router("always_busiest", 8, seed=5).route(req(), FakeView(8)) == router(
        "always_busiest", 8, seed=5
    ).route(req(), FakeView(8))


def test_always_busiest_piles_the_load_onto_one_instance_and_loses_to_round_robin():
    lat = LinearLatency(2000.0, 5.0, 200.0)
    reqs = [Request(i, i * 2_000, 200, 40) for i in range(120)]
    busiest = run(reqs, engine(max_num_batched_tokens=256, total_kv_blocks=512), lat, instances=4,
                  routing="always_busiest").recorder.table()
    reqs = [Request(i, i * 2_000, 200, 40) for i in range(120)]
    rr = run(reqs, engine(max_num_batched_tokens=256, total_kv_blocks=512), lat, instances=4,
             routing="round_robin").recorder.table()
    share = busiest["instance"].value_counts(normalize=True).max()
    assert share > 0.9  # the in-transit count makes the first pick the busiest from then on
    assert busiest["e2e_ms"].mean() > 2 * rr["e2e_ms"].mean()
