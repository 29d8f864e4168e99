"""Batching runtimes (distsim.runtime) with the fleet's other features: a measurement window (which requests
and which batches count, that pausing at its edges changes nothing, that a whole-run window is no window),
and autoscaling (provisioning, draining, billing, every scaler on a runtime's signals, bad settings).

Runs are small: the mixed fleet (conf/cluster/mixed_fleet.yaml) under its 70/20/10 mix at 400 requests,
and a vision pool of a fixed 8 ms batch curve beside one vLLM replica."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from distsim import load_config, simulate
from distsim.autoscale.replicas import DRAINING, OFF, PROVISIONING, SERVING
from distsim.errors import ConfigError
from distsim.events.loop import PRIO_ARRIVAL, EventLoop
from distsim.metrics.settings import MeasureWindow
from distsim.metrics.summary import distribution, rnd
from distsim.request import new_typed_request
from distsim.resolve import resolve
from distsim.runtime.curves.fixed import FixedCurve
from distsim.runtime.replica import RuntimeReplica
from distsim.simulate import run as simulate_run
from distsim.simulate import summary_json
from distsim.world import build

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
    scenario = resolve(load_config(overrides))
    return simulate_run(dataclasses.replace(scenario, sim=dataclasses.replace(scenario.sim, window=window)))


@pytest.mark.parametrize("keys", [[], ["sim.horizon_s=6"]], ids=["to-the-end", "horizon"])
def test_a_window_over_the_whole_run_gives_the_summary_without_one(keys):
    """Every request measured, the span the run's: every figure (the runtimes' busy time from their snapshots,
    the types section and its batches included) equals the plain run's."""
    plain = run(*keys)
    whole = run_with_window([*MIXED, *keys], MeasureWindow(0, 6_000_000 if keys else 100_000_000_000))
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
    replica.departure_listeners.append(lambda req, now, how: None)
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


# ---------------------------------------------------------------------------------- autoscaled runtime pools
def scaled_fleet(autoscale: str, runtime: str = "max_batch_size:4,batch_window_ms:1,concurrency:1,curve:{kind:fixed,batch_ms:8}",
                 mix: str = "{llm:0.1,vision:0.9}", rate: float = 300.0, n: int = 1500, more: str = "") -> list[str]:
    """One vLLM replica beside an autoscaled vision pool (``autoscale``: its autoscale keys; ``more``: other
    keys of the pool)."""
    return [f"cluster.pools=[{{name:llm,count:1}},{{name:vis,kind:runtime,model:resnet-50,count:1,{more}"
            f"runtime:{{{runtime}}},autoscale:{{{autoscale}}}}}]",
            f"workload.mix={mix}", "+workload.types.vision.items={dist:fixed,value:1}",
            f"workload.arrival.rate_rps={rate}", f"workload.num_requests={n}"]


SCHEDULED_VIS = "kind:scheduled,min:1,max:3,schedule:[[1.0,3],[3.0,1]],provision_s:0.4,interval_s:1,cooldown_s:0"


def run_checked(overrides: list[str], probe) -> tuple[object, object]:
    """simulate.run's world with every invariant (the front's and the autoscaler's) and ``probe(front, now)``
    checked after every event; (recorder, front)."""
    scenario = resolve(load_config(overrides))
    loop = EventLoop(scenario.sim.horizon_us)
    parts = build(scenario, loop)  # the typed front over the cluster, the TypedRecorder
    recorder, front = parts.recorder, parts.world
    front.feed(scenario.workload)

    def after(now: int) -> None:
        parts.check_invariants()  # the front's and the autoscaler's (its feature's)
        probe(front, now)

    loop.after_event = after
    loop.run()
    front.finish(None)
    return recorder, front


def test_a_runtime_replica_serves_only_once_provisioned_and_a_draining_one_takes_none_and_loses_none():
    draining_outstanding: dict[int, int] = {}
    seen_states: set[tuple[int, str]] = set()

    def probe(front, now):
        sp = front.cluster.autoscaler.pools[0]
        state = front.routes["vision"].state
        for replica in sp.replicas.replicas:
            (e,) = replica.engines
            seen_states.add((e, replica.state))
            k = e - front.runtimes[0].index
            if replica.state == DRAINING:  # routed nothing new: its outstanding count only falls
                assert state.outstanding[k] <= draining_outstanding.get(e, state.outstanding[k])
                draining_outstanding[e] = state.outstanding[k]
            else:
                draining_outstanding.pop(e, None)

    recorder, front = run_checked(scaled_fleet(SCHEDULED_VIS), probe)
    rows = recorder.table()
    assert (rows["status"] == "completed").all() and sorted(rows["request_id"]) == list(range(1500))
    vis = front.runtimes[0].index
    new = rows[rows["instance"] > vis]
    assert len(new) > 0 and new["arrival_ms"].min() >= 1400.0  # asked for at 1 s, serving 0.4 s later
    assert ((rows["instance"] > vis) & (rows["arrival_ms"] >= 3000.0)).sum() == 0  # drained from 3 s
    assert {(vis + 1, DRAINING), (vis + 2, DRAINING), (vis + 1, PROVISIONING)} <= seen_states
    assert [r.state for r in front.cluster.autoscaler.pools[0].replicas.replicas] == [SERVING, OFF, OFF]


def replica_hours(timeline: pd.DataFrame, start_ms: float, end_ms: float) -> float:
    """The integral of the replicas billed (serving + provisioning + draining) over [start_ms, end_ms]."""
    edges = np.append(np.clip(timeline["time_ms"].to_numpy(), start_ms, end_ms), end_ms)
    replicas = (timeline["serving"] + timeline["provisioning"] + timeline["draining"]).to_numpy()
    return float(np.dot(replicas, np.diff(edges))) / 3.6e6


def test_an_autoscaled_runtime_pools_cost_is_the_integral_of_its_billed_replicas():
    result = simulate(load_config(scaled_fleet(SCHEDULED_VIS)))
    s, rows, inst = result.summary, result.requests, result.instances
    pool = s["autoscale"]["pools"]["vis"]
    assert (pool["scale_ups"], pool["scale_downs"], pool["peak_replicas"]) == (2, 2, 3)
    start_ms = rows["arrival_ms"].min()
    span_s = s["sim"]["simulated_s"]
    hours = replica_hours(result.timeline.to_pandas(), start_ms, start_ms + span_s * 1000)
    price = inst.loc[inst["role"] == "runtime", "price_usd_per_gpu_hour"].iloc[0]
    assert pool["gpu_hours"] == pytest.approx(hours, abs=2e-6) and pool["cost_usd"] == pytest.approx(hours * price, abs=2e-6)
    assert pool["mean_replicas"] == pytest.approx(hours * 3600 / span_s, abs=1e-4)
    llm = inst[inst["role"] != "runtime"]
    fleet_usd = float((llm["price_usd_per_gpu_hour"] * llm["gpus"]).sum()) * span_s / 3600 + pool["cost_usd"]
    done = rows[(rows["status"] == "completed") & (rows["type"] == "llm")]
    tokens = done["input_tokens"].sum() + done["output_tokens"].sum()
    assert s["cost_usd_per_1k_tokens"] * tokens / 1000 == pytest.approx(fleet_usd, abs=2e-6)
    busy_gpu_s = (inst["busy_ms"] * inst["gpus"]).sum() / 1000
    assert s["gpu_utilization"] == pytest.approx(busy_gpu_s / (len(llm) * span_s + hours * 3600), abs=1e-4)


@pytest.mark.parametrize("scaler", ["kind:queue_slo,queue_per_replica:2",
                                    "kind:target_utilization,signal:outstanding,target:3",
                                    "kind:target_utilization,signal:queue_depth,target:2",
                                    "kind:target_utilization,signal:running,target:3"])
def test_a_scaler_grows_a_runtime_pool_under_load_and_shrinks_it_after(scaler):
    """Vision requests at 600 req/s for 2 s (one replica serves 500: four 1-item requests per 8 ms batch),
    then 50 req/s: the pool grows past one replica, then drains back, every request completed."""
    keys = f"{scaler},min:1,max:4,interval_s:0.1,provision_s:0.2,cooldown_s:0.5"
    result = simulate(load_config([*scaled_fleet(keys, mix="{vision:1.0}"), "workload.arrival.process=mmpp",
                                   "workload.arrival.rate_rps=null", "workload.arrival.rates_rps=[600,50]",
                                   "workload.arrival.dwell_s=[2,100]", "workload.num_requests=1400"]))
    timeline = result.timeline.to_pandas()
    billed = timeline["serving"] + timeline["provisioning"] + timeline["draining"]
    assert billed.max() > 1 and timeline["serving"].iloc[-1] < timeline["serving"].max()
    assert billed.max() <= 4 and timeline["serving"].min() >= 1
    assert (result.requests["status"] == "completed").all()


@pytest.mark.parametrize("overrides, key", [
    (scaled_fleet("kind:target_utilization,target:0.5,max:2"), "cluster.pools[1].autoscale.signal"),
    (scaled_fleet("kind:queue_slo,max:2", runtime="max_batch_size:4"), None),
    (scaled_fleet("kind:queue_slo,max:2", more="hardware:H100,mig:{profile:1g.10gb},"), "cluster.pools[1].mig.profile"),
    (scaled_fleet("kind:queue_slo,min:2,max:3"), "cluster.pools[1].count"),
])
def test_runtime_autoscaling_settings_are_checked_naming_the_key(overrides, key):
    if key is None:  # a good one resolves
        assert resolve(load_config(overrides)).runtimes[0].autoscale.max_replicas == 2
        return
    with pytest.raises(ConfigError) as err:
        resolve(load_config(overrides))
    assert err.value.key == key


def test_the_provisioning_delay_loads_the_weights_the_gpu_holds():
    """Null provision_s: one copy of the model per concurrency slot at load_gbps, plus startup_s."""
    spec = resolve(load_config(scaled_fleet("kind:queue_slo,max:2,provision_s:null",
                                            runtime="max_batch_size:4,concurrency:3"))).runtimes[0]
    expected_s = spec.model.weight_bytes * 3 / 1.1e9 + 30.0
    assert spec.autoscale.provision_us == round(expected_s * 1e6)


def test_with_a_window_an_autoscaled_runtime_pool_is_billed_within_it_and_a_whole_run_window_is_no_window():
    keys = scaled_fleet(SCHEDULED_VIS)
    plain = simulate(load_config(keys))
    windowed = simulate(load_config([*keys, "sim.warmup_s=2", "sim.measure_s=2"]))
    hours = replica_hours(plain.timeline.to_pandas(), 2000.0, 4000.0)
    assert windowed.summary["autoscale"]["pools"]["vis"]["gpu_hours"] == pytest.approx(hours, abs=2e-6)
    assert windowed.timeline.to_pandas().equals(plain.timeline.to_pandas())  # the run itself is the same
    whole = dict(run_with_window(keys, MeasureWindow(0, 100_000_000_000)).summary)
    whole.pop("window")
    assert summary_json(whole) == summary_json(plain.summary)


def test_an_autoscaled_llm_pool_beside_fixed_runtimes_bills_every_replica_and_stops_when_both_are_done():
    llm = "{name:llm,count:1,autoscale:{kind:scheduled,min:1,max:2,schedule:[[1.0,2],[2.0,1]],provision_s:0.2,interval_s:1,cooldown_s:0}}"
    keys = [f"cluster.pools=[{llm},{{name:vis,kind:runtime,model:resnet-50,count:1}}]", "workload.mix={llm:0.5,vision:0.5}",
            "workload.arrival.rate_rps=60", "workload.num_requests=240"]
    recorder, front = run_checked(keys, lambda front, now: None)
    assert (recorder.table()["status"] == "completed").all() and not front.cluster.autoscaler.active()
    result = simulate(load_config(keys))
    s, inst = result.summary, result.instances
    span_s = s["sim"]["simulated_s"]
    pool = s["autoscale"]["pools"]["llm"]
    fixed = inst[inst["role"] == "runtime"]
    fleet_usd = float((fixed["price_usd_per_gpu_hour"] * fixed["gpus"]).sum()) * span_s / 3600 + pool["cost_usd"]
    done = result.requests[(result.requests["status"] == "completed") & (result.requests["type"] == "llm")]
    tokens = done["input_tokens"].sum() + done["output_tokens"].sum()
    assert pool["scale_ups"] == 1 and s["cost_usd_per_1k_tokens"] * tokens / 1000 == pytest.approx(fleet_usd, abs=2e-6)
