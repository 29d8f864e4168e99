"""Batching runtimes (distsim.runtime) with the fleet's other features: a measurement window (which requests
and which batches count, that pausing at its edges changes nothing, that a whole-run window is no window).

Runs are small: the mixed fleet (conf/cluster/mixed_fleet.yaml) under its 70/20/10 mix at 400 requests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from distsim import load_config, simulate
from distsim.config.scenario import resolve
from distsim.config.window import MeasureWindow
from distsim.engine.loop import PRIO_ARRIVAL, EventLoop
from distsim.metrics.summary import distribution, rnd
from distsim.request import new_typed_request
from distsim.runtime.curves.fixed import FixedCurve
from distsim.runtime.replica import RuntimeReplica
from distsim.simulate import run as simulate_run
from distsim.simulate import summary_json

MIXED = ["cluster=mixed_fleet", "workload=mixed_70_20_10", "workload.num_requests=400"]
WINDOW = ["sim.warmup_s=2", "sim.measure_s=5"]


def run(*overrides: str):
    return simulate(load_config([*MIXED, *overrides]))


def _us(ms: pd.Series) -> np.ndarray:
    return np.rint(ms.to_numpy(dtype=np.float64) * 1000.0).astype(np.int64)


def batches_ending_in(rows: pd.DataFrame, low_us: int, high_us: int) -> pd.DataFrame:
    """The batches seen in the request table: completed non-LLM requests that started and ended together on
    one replica form a batch; those ending in (low, high]."""
    done = rows[(rows["type"] != "llm") & (rows["status"] == "completed")].copy()
    done["start_us"] = _us(done["arrival_ms"] + done["queue_ms"])
    done["end_us"] = _us(done["completion_ms"])
    batches = done.groupby(["type", "instance", "start_us", "end_us"]).agg(items=("items", "sum"), requests=("items", "size"))
    ends = batches.index.get_level_values("end_us")
    return batches[(ends > low_us) & (ends <= high_us)].reset_index()


def expected_type(rows: pd.DataFrame, name: str, span_s: float, batches: pd.DataFrame) -> dict:
    """summary.json's ``types.NAME`` recomputed from the measured rows and the batches in the span."""
    mine = rows[rows["type"] == name]
    done = mine[mine["status"] == "completed"]
    entry = {
        "requests": len(mine), "completed": len(done),
        "dropped": int((mine["status"] == "dropped").sum()), "unfinished": int((mine["status"] == "unfinished").sum()),
        "slo_attainment": rnd(int(mine["met_slo"].sum()) / len(mine)),
        "latency_ms": distribution(done["e2e_ms"].to_numpy()), "queue_ms": distribution(mine["queue_ms"].to_numpy()),
        "throughput": {"requests_per_s": rnd(len(done) / span_s)},
    }
    if name == "llm":
        entry["ttft_ms"] = distribution(done["ttft_ms"].to_numpy())
        return entry
    entry["throughput"]["items_per_s"] = rnd(int(done["items"].sum()) / span_s)
    mine_b = batches[batches["type"] == name]
    entry["batches"] = {"count": len(mine_b), "items": distribution(mine_b["items"].to_numpy(dtype=np.float64)),
                        "requests": distribution(mine_b["requests"].to_numpy(dtype=np.float64))}
    return entry


def test_a_window_measures_the_requests_arriving_in_it_and_the_batches_ending_in_it():
    result = run(*WINDOW)
    rows, s = result.requests, result.summary
    arrival = rows["arrival_ms"]
    assert (((arrival >= 2000.0) & (arrival < 7000.0)) == rows["measured"]).all()
    mine = rows[rows["measured"]]
    assert s["window"]["measured"] == len(mine) == sum(t["requests"] for t in s["types"].values())
    assert set(mine["type"]) == {"llm", "vision", "asr"} and s["window"]["excluded_before"] > 0
    span_s = s["window"]["span_s"]
    batches = batches_ending_in(rows, 2_000_000, 7_000_000)
    for name, entry in s["types"].items():
        got = dict(entry)
        full_share = got.get("batches", {}).pop("full_share", None)
        assert got == expected_type(mine, name, span_s, batches), name
        assert name == "llm" or 0.0 <= full_share <= 1.0
    whole = run().summary["types"]
    assert 0 < s["types"]["vision"]["batches"]["count"] < whole["vision"]["batches"]["count"]


def test_a_window_does_not_change_a_mixed_run():
    plain, windowed = run(), run(*WINDOW)
    pd.testing.assert_frame_equal(windowed.requests.drop(columns=["measured"]), plain.requests)
    pd.testing.assert_frame_equal(windowed.instances, plain.instances)
    assert windowed.summary["sim"]["events"] == plain.summary["sim"]["events"]


def run_with_window(overrides: list[str], window: MeasureWindow):
    scenario = resolve(load_config([*MIXED, *overrides]))
    return simulate_run(dataclasses.replace(scenario, sim=dataclasses.replace(scenario.sim, window=window)))


@pytest.mark.parametrize("keys", [[], ["sim.horizon_s=6"]], ids=["to-the-end", "horizon"])
def test_a_window_over_the_whole_run_gives_the_summary_without_one(keys):
    """Every request measured, the span the run's: every figure (the runtimes' busy time from their snapshots,
    the types section and its batches included) equals the plain run's."""
    plain = run(*keys)
    whole = run_with_window(keys, MeasureWindow(0, 6_000_000 if keys else 100_000_000_000))
    assert bool(whole.requests["measured"].all())
    summary = dict(whole.summary)
    assert summary.pop("window")["excluded_before"] == 0
    if keys:  # batches still running at the horizon have not ended: the window leaves them out
        for name in ("vision", "asr"):
            windowed, every = summary["types"][name].pop("batches"), plain.summary["types"][name].pop("batches")
            assert windowed["count"] <= every["count"]
    assert summary_json(summary) == summary_json(plain.summary)


def union_up_to(intervals: list[tuple[int, int]], high: int) -> int:
    """The measure of the union of ``intervals`` within [0, high]."""
    total, reach = 0, 0
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, high)
        if b > a:
            total += b - a
            reach = b
        reach = max(reach, min(b, high))
    return total


@dataclasses.dataclass(frozen=True)
class _Pool:
    max_batch_size: int = 4
    window_us: int = 300
    concurrency: int = 2
    curve: object = FixedCurve(1_000)
    serves: str = "vision"
    name: str = "p"


def test_a_replicas_busy_time_is_credited_at_batch_ends():
    """Paused at any instant, the busy time a window reads is the busy time (union of the running batches)
    up to the last batch that ended by then, as a vLLM instance's is the time of the steps ended by then."""
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(400, 400)).astype(np.int64) + 1
    loop = EventLoop()
    replica = RuntimeReplica(0, _Pool(), loop)
    replica.on_done = lambda req: None
    for i, t in enumerate(arrivals.tolist()):
        req = new_typed_request(i, t, "vision", int(rng.integers(1, 4)), 224.0, None)
        loop.schedule(t, PRIO_ARRIVAL, lambda now, r: replica.enqueue(r, now), req)
    for edge in range(5_000, int(arrivals[-1]) + 5_000, 7_919):
        loop.horizon_us = edge
        loop.run()
        ended = [b.end_us for b in replica.batches if b.end_us <= edge]
        expected = union_up_to([(b.start_us, b.end_us) for b in replica.batches], max(ended, default=0))
        assert replica.busy_ended_us() == expected
    loop.horizon_us = None
    loop.run()
    assert replica.busy_ended_us() == replica.stats.busy_us == union_up_to([(b.start_us, b.end_us) for b in replica.batches], 1 << 62)
