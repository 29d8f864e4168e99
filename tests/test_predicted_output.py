"""Predicted output first (cluster.engine.scheduler=predicted_output): the order it claims, aging that bounds a
long request's wait, predictions that depend only on the seed and the request (never on routing), the
predictor's error distributed as it says, and bad values refused in one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from simkit import engine, run

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.instance.queues import QUEUES
from distsim.instance.queues.output_prediction import OutputPrediction
from distsim.instance.queues.predicted_output import PredictedOutputQueue
from distsim.request import Request
from distsim.resolve import resolve


def _drain(q) -> list[int]:
    return [q.popleft().request_id for _ in range(len(q))]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 4000)), min_size=1, max_size=30))
def test_an_oracle_serves_the_shorter_output_first_fcfs_among_equals(items):
    q = QUEUES["predicted_output"](0.0, OutputPrediction.of(3, 0.0))
    for i, (t, out) in enumerate(items):
        q.append(Request(i, t, 100, out))
    expected = sorted(range(len(items)), key=lambda i: (items[i][1], items[i][0], i))
    assert _drain(q) == expected


def test_a_prediction_is_the_true_length_times_exp_sigma_z():
    pred = OutputPrediction.of(7, 0.8)
    for rid in (0, 1, 99, -3):
        req = Request(rid, 0, 10, 300)
        assert pred.predict(req) == pytest.approx(300 * np.exp(0.8 * pred.z(rid)))
    assert OutputPrediction.of(7, 0.0).predict(Request(5, 0, 10, 300)) == 300.0


def test_the_draws_are_standard_normal_and_the_seeds_own():
    zs = np.array([OutputPrediction.of(0, 1.0).z(i) for i in range(5000)])
    assert stats.kstest(zs, "norm").pvalue > 0.01
    same = np.array([OutputPrediction.of(0, 1.0).z(i) for i in range(50)])
    other = np.array([OutputPrediction.of(1, 1.0).z(i) for i in range(50)])
    assert (same == zs[:50]).all() and not np.allclose(same, other)


def test_with_sigma_the_order_follows_the_predictions_not_the_truth():
    pred = OutputPrediction.of(11, 1.5)
    q = QUEUES["predicted_output"](0.0, pred)
    reqs = [Request(i, i, 100, 200) for i in range(40)]  # equal true outputs: only the errors order them
    for r in reqs:
        q.append(r)
    assert _drain(q) == sorted(range(40), key=lambda i: pred.predict(reqs[i]))


def test_the_order_in_a_run_serves_a_short_output_ahead_of_earlier_long_ones():
    # one sequence at a time: a queue of long generations, then a short one; the oracle runs it next
    def reqs():
        return [Request(0, 0, 8, 40)] + [Request(i, 10 + i, 8, 400) for i in range(1, 6)] + [Request(6, 20, 8, 4)]

    lat = LinearLatency(1000.0, 1.0, 10.0)
    first = {}
    for order in ("fcfs", "predicted_output"):
        params = engine(max_num_seqs=1, total_kv_blocks=2000, scheduler=order, output_prediction_sigma=0.0)
        table = run(reqs(), params, lat).recorder.table().set_index("request_id")
        first[order] = table["first_token_ms"].rank().astype(int).to_dict()
    assert first["fcfs"][6] == 7  # last
    assert first["predicted_output"][6] == 2  # right after the request already running


def test_aging_bounds_the_wait_of_a_long_generation():
    # a 2,000-token generation among 20-token ones arriving twice as fast as one sequence at a time drains
    # them (20 steps of 1 ms each, one every 10 ms): without aging it waits behind every shorter one, about
    # 8 s; aged at 10,000 tokens/s, its 1,980 extra tokens are worth 0.2 s of waiting, after which later
    # short ones queue behind it, so only the ~20 that came before then go ahead of it
    def reqs():
        return [Request(i, i * 10_000, 8, 2000 if i == 3 else 20) for i in range(400)]

    lat = LinearLatency(1000.0, 1.0, 0.0)
    wait = {}
    for aging in (0.0, 10_000.0):
        params = engine(max_num_seqs=1, total_kv_blocks=4000, scheduler="predicted_output",
                        scheduler_aging_per_s=aging, output_prediction_sigma=0.0)  # fmt: skip
        table = run(reqs(), params, lat).recorder.table().set_index("request_id")
        assert (table["status"] == "completed").all()
        wait[aging] = float(table.loc[3, "queue_ms"])
    assert wait[0.0] > 5000.0
    assert wait[10_000.0] < 1000.0


def _predictions_seen(monkeypatch, routing: str, seed: int) -> dict[int, float]:
    seen: dict[int, float] = {}
    original = PredictedOutputQueue.key

    def key(self, req):
        seen[req.request_id] = self.prediction.predict(req)
        return original(self, req)

    monkeypatch.setattr(PredictedOutputQueue, "key", key)
    reqs = [Request(i, i * 3000, 16 + 7 * (i % 13), 5 + 11 * (i % 17)) for i in range(300)]
    params = engine(scheduler="predicted_output", output_prediction_sigma=1.0, total_kv_blocks=400)
    run(reqs, params, instances=3, routing=routing, seed=seed)
    monkeypatch.setattr(PredictedOutputQueue, "key", original)
    return seen


def test_two_routing_policies_see_the_same_prediction_of_every_request(monkeypatch):
    rr = _predictions_seen(monkeypatch, "round_robin", 5)
    ll = _predictions_seen(monkeypatch, "least_loaded", 5)
    assert len(rr) == 300 and rr == ll
    other_seed = _predictions_seen(monkeypatch, "round_robin", 6)
    assert other_seed != rr


def test_the_same_config_and_seed_give_identical_results():
    overrides = ["cluster=predicted_output", "workload.num_requests=150", "workload.arrival.rate_rps=60", "seed=2"]
    a = simulate(load_config(overrides)).requests
    b = simulate(load_config(overrides)).requests
    assert a.equals(b)


@pytest.mark.parametrize(
    ("value", "message"),
    [("-0.5", "from 0"), ("11", "to 10"), ("nan", "from 0"), ("true", "must be a number"), ("abc", "must be a number")],
)
def test_a_bad_sigma_is_one_line_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=r"cluster.engine.output_prediction_sigma.*" + message):
        resolve(load_config(["cluster.engine.scheduler=predicted_output", f"cluster.engine.output_prediction_sigma={value}"]))


def test_a_bad_sigma_on_the_command_line_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "distsim", "cluster.engine.output_prediction_sigma=-1", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cluster.engine.output_prediction_sigma" in lines[0]
