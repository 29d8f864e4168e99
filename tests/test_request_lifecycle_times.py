"""requests.parquet's lifecycle: arrival <= route <= enqueue <= schedule <= first token <= completion (INV-5),
each time in milliseconds of integer microseconds, and the gaps the configured delays put between them."""

from __future__ import annotations

import numpy as np
import pytest

from distsim import load_config, simulate

CHAIN = ["arrival_ms", "route_ms", "enqueue_ms", "schedule_ms", "first_token_ms", "completion_ms"]


def _run(*overrides: str):
    return simulate(load_config(["workload.num_requests=150", *overrides])).requests


@pytest.mark.parametrize(
    "overrides",
    [[], ["cluster=pd_disagg"], ["policy=hedged", "workload.arrival.rate_rps=60"], ["cluster.cells.count=2", "cluster.instances=4"],
     ["policy.routing.latency_ms=3", "policy.admission.latency_ms=2"], ["cluster.engine.prefill_batch_window_ms=20"]],
    ids=["mixed", "pd", "hedged", "cells", "decision_latency", "batching_window"],
)  # fmt: skip
def test_every_completed_request_keeps_the_chain(overrides):
    done = (t := _run(*overrides))[t["status"] == "completed"]
    assert len(done) > 0
    for earlier, later in zip(CHAIN, CHAIN[1:]):
        assert (done[earlier] <= done[later]).all(), (earlier, later)
    # queue_ms is the schedule time from arrival; each time is whole microseconds
    assert np.allclose(done["schedule_ms"] - done["arrival_ms"], done["queue_ms"], atol=1e-6)
    for name in CHAIN[1:4]:
        assert np.allclose(np.rint(done[name] * 1000.0), done[name] * 1000.0, atol=1e-6)


def test_the_decision_latency_lies_between_route_and_enqueue():
    base, slow = _run(), _run("policy.routing.latency_ms=3", "policy.admission.latency_ms=2")
    assert (base["route_ms"] == base["arrival_ms"]).all()  # routed as it arrives
    gap = (slow["enqueue_ms"] - slow["route_ms"]) - (base["enqueue_ms"] - base["route_ms"])
    assert np.allclose(gap, 5.0)


def test_the_front_ends_ingestion_delays_the_enqueue_by_its_cost():
    t = _run("cluster.frontend.request_us=1000", "cluster.frontend.per_input_token_us=0")
    assert np.allclose(t["enqueue_ms"] - t["route_ms"], 1.0)


def test_a_rejected_request_was_never_routed_nor_queued():
    t = _run("policy=reject_all")
    assert (t["status"] == "rejected").all()
    assert t[["route_ms", "enqueue_ms", "schedule_ms"]].isna().all().all()


@pytest.mark.filterwarnings("ignore:cluster.engine.max_model_len")
def test_a_request_too_long_for_the_engine_is_routed_and_enqueued_but_never_scheduled():
    t = _run("workload=fixed", "workload.num_requests=50", "workload.input_tokens.value=4000", "cluster.engine.max_model_len=2048")
    assert (t["status"] == "rejected").all()
    assert t["route_ms"].notna().all() and t["enqueue_ms"].notna().all() and t["schedule_ms"].isna().all()
