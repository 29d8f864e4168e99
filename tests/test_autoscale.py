"""Autoscaling: provisioning, draining, cost, each kind's rule, the routers' membership, determinism, and
that nothing changes without it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from raykit import sweep_on_local_ray
from simkit import FAKE_HW, engine, run, tiny_model

from distsim import load_config, simulate
from distsim.autoscale.kinds.queue_slo import QueueSlo, QueueSloParams
from distsim.autoscale.kinds.scheduled import Scheduled, ScheduleParams
from distsim.autoscale.kinds.target_utilization import TargetParams, TargetUtilization
from distsim.autoscale.replicas import OFF, SERVING
from distsim.autoscale.schema import AutoscaleConfig
from distsim.autoscale.settings import resolve_autoscale
from distsim.cluster import settings as cluster_settings
from distsim.cluster.pools import PoolSpec
from distsim.config.schema import PolicyConfig
from distsim.errors import ConfigError, ConfigWarning, SimulationError
from distsim.instance.latency.linear import LinearLatency
from distsim.policies.base import PolicyContext
from distsim.policies.cost_escalation import CostEscalation, CostEscalationParams
from distsim.policies.random import RandomRouter
from distsim.policies.round_robin import RoundRobin
from distsim.policies.session_affinity import LoadGuardParams, SessionAffinity
from distsim.request import Request
from distsim.simulate import summary_json

MS = 1000  # microseconds


def scaling(count: int, **keys):
    """Checked autoscale settings for a pool of ``count``: ``keys`` are autoscale keys."""
    node = OmegaConf.structured(AutoscaleConfig)
    for key, value in keys.items():
        node[key] = value
    return resolve_autoscale(node, "cluster.autoscale", count, "cluster.instances", 0.0)


def pool(count: int, role: str = "mixed", name: str = "p", **keys) -> PoolSpec:
    params = engine(max_num_seqs=8, max_num_batched_tokens=256, block_size=16, total_kv_blocks=200)
    auto = scaling(count, **keys) if keys else None
    return PoolSpec(name, count, role, FAKE_HW, tiny_model(1000), 1, params, LinearLatency(100.0, 2.0, 5.0),
                    "cluster", 1, auto)


def steady(n: int, every_us: int, prompt: int = 32, output: int = 40) -> list[Request]:
    return [Request(i, i * every_us, prompt, output) for i in range(n)]


def checked(probe=None):
    """An after-event probe: every invariant after every event, then ``probe(sim, now)``."""

    def after(sim, now):
        sim.cluster.check_invariants()
        sim.cluster.autoscaler.check_invariants()
        sim.checks += 1
        if probe is not None:
            probe(sim, now)

    return after


def rows(sim) -> list[tuple]:
    return sim.cluster.autoscaler.pools[0].replicas.timeline


def test_a_new_replica_takes_no_request_before_its_provisioning_delay_ends():
    spec = pool(1, kind="scheduled", max=3, schedule=[[0.05, 3]], provision_s=0.1, interval_s=1.0, cooldown_s=0.0)

    def idle_until_ready(sim, now):
        if now < 150 * MS:
            for i in (1, 2):
                inst = sim.cluster.instances[i]
                assert not inst.in_flight() and sim.cluster.state.outstanding[i] == 0

    sim = run(steady(300, MS), pools=[spec], after_event=checked(idle_until_ready))
    df = sim.recorder.table()
    assert (df["status"] == "completed").all() and sim.checks > 0
    late = df[df["instance"] > 0]
    assert len(late) > 0 and late["arrival_ms"].min() >= 150.0
    assert rows(sim) == [(0, 1, 0, 0, 1), (50 * MS, 1, 2, 0, 3), (150 * MS, 3, 0, 0, 3)]


def test_a_draining_replica_takes_no_new_request_and_loses_none():
    spec = pool(3, kind="scheduled", min=1, max=3, schedule=[[0.05, 1]], interval_s=1.0, cooldown_s=0.0)
    sim = run(steady(200, MS, output=300), pools=[spec], after_event=checked())
    df = sim.recorder.table()
    assert (df["status"] == "completed").all() and len(df) == 200
    kept = int(df[df["arrival_ms"] > 50.0]["instance"].unique().item())  # the one left serving
    gone = df[df["instance"] != kept]
    assert gone["arrival_ms"].max() <= 50.0  # nothing new reached a draining replica
    replicas = sim.cluster.autoscaler.pools[0].replicas.replicas
    assert [r.state for r in replicas].count(OFF) == 2
    # each drained replica left when its last request completed, and stopped costing then
    for r in replicas:
        if r.state == OFF:
            mine = df[df["instance"] == r.engines[0]]
            assert r.bills == [[0, round(mine["completion_ms"].max() * MS)]]
    assert [row[1:4] for row in rows(sim)][:2] == [(3, 0, 0), (1, 0, 2)]
    assert rows(sim)[-1][1:4] == (1, 0, 0)


def test_the_replica_drained_is_the_one_with_fewest_outstanding_the_newest_among_equals():
    spec = pool(3, kind="scheduled", min=1, max=3, schedule=[[0.0005, 2]], interval_s=1.0, cooldown_s=0.0)
    # one long request on instance 0 at t=0: at the scale-down 1 and 2 are idle, and 2 is the newer
    sim = run([Request(0, 0, 32, 200), Request(1, 2 * MS, 32, 5)], pools=[spec], after_event=checked())
    replicas = sim.cluster.autoscaler.pools[0].replicas.replicas
    assert [r.state for r in replicas] == [SERVING, SERVING, OFF]
    assert replicas[2].bills == [[0, 500]]  # idle: it left at once


def test_scale_down_waits_out_the_cool_down():
    spec = pool(3, kind="scheduled", min=1, max=3, schedule=[[0.05, 1]], interval_s=0.02, cooldown_s=0.1)
    sim = run(steady(300, MS), pools=[spec], after_event=checked())
    first_drain = next(t for t, s, p, d, _ in rows(sim) if s < 3)
    # evaluations at 20, 40 ms want 3; from 50 ms they want 1; the 40 ms one leaves the window after 140 ms
    assert first_drain == 160 * MS
    assert (sim.recorder.table()["status"] == "completed").all()


def test_pd_pools_scale_their_own_role_and_every_request_completes():
    prefill = pool(1, "prefill", "prefill")
    decode = pool(2, "decode", "decode", kind="scheduled", min=1, max=3, schedule=[[0.02, 3], [0.2, 1]],
                  provision_s=0.03, interval_s=1.0, cooldown_s=0.0)
    sim = run(steady(300, MS, output=60), pools=[prefill, decode], after_event=checked())
    df = sim.recorder.table()
    assert (df["status"] == "completed").all()
    assert set(df["prefill_instance"]) == {0}
    assert set(df["instance"]) == {1, 2, 3}  # the third decode replica served once it was ready
    assert df[df["instance"] == 3]["arrival_ms"].min() >= 50.0
    assert list(sim.cluster.decode_view.members) == [int(df[df["arrival_ms"] > 200]["instance"].unique().item())]


def test_a_data_parallel_replica_scales_as_one_and_the_checks_catch_a_stray_candidate():
    spec = pool(2, kind="scheduled", min=1, max=3, schedule=[[0.02, 3], [0.12, 1]], provision_s=0.03,
                interval_s=1.0, cooldown_s=0.0)
    spec = PoolSpec(**{**vars(spec), "data_parallel_size": 2})  # each replica is two engines
    sim = run(steady(300, MS, output=60), pools=[spec], after_event=checked())
    df = sim.recorder.table()
    assert (df["status"] == "completed").all()
    assert set(df["instance"]) == set(range(6))  # the third replica's two engines served once ready
    assert df[df["instance"] >= 4]["arrival_ms"].min() >= 50.0
    assert len(sim.cluster.entry_view.members) == 2  # one replica left: its two engines
    replica = sim.cluster.autoscaler.pools[0].replicas.replicas[0]
    replica.state = "off" if replica.state == SERVING else SERVING  # out of step with the views
    with pytest.raises(SimulationError, match="INV-19"):
        sim.cluster.autoscaler.check_invariants()


def test_hedged_copies_on_a_draining_replica_are_let_go_and_it_still_leaves():
    node = OmegaConf.structured(PolicyConfig)
    node.hedge.delay_ms = 0.5  # most requests get a copy, many of them on replicas about to drain
    spec = pool(3, kind="scheduled", min=1, max=3, schedule=[[0.03, 1]], interval_s=1.0, cooldown_s=0.0)
    sim = run(steady(200, MS, prompt=200), pools=[spec], policy_cfg=cluster_settings.policy(node), after_event=checked())
    df = sim.recorder.table()
    assert (df["status"] == "completed").all() and len(df) == 200
    assert sim.cluster.hedger.copies_sent > 0
    assert [r.state for r in sim.cluster.autoscaler.pools[0].replicas.replicas].count(OFF) == 2


# ---------------------------------------------------------------------------------- the kinds' rules
def probe(serving=4, provisioning=0, target=None, now_us=0, **means):
    """A stand-in for PoolProbe: ``means`` per signal; ``outstanding`` given as a per-replica list."""
    outstanding = np.asarray(means.pop("outstanding", [0] * serving), dtype=float)
    completions = means.pop("completions", (0, 0))
    return SimpleNamespace(
        serving=serving, provisioning=provisioning, target=serving + provisioning if target is None else target,
        now_us=now_us, mean=lambda name: means.get(name, 0.0), completions=lambda: completions,
        per_replica=lambda name: outstanding,
    )


def test_target_utilization_follows_hpa():
    scaler = TargetUtilization(TargetParams(signal="kv_utilization", target=0.5), 4)
    assert scaler.desired(probe(kv_utilization=0.9)) == 8  # ceil(4 x 0.9 / 0.5)
    assert scaler.desired(probe(kv_utilization=0.54)) == 4  # within the 10% tolerance
    assert scaler.desired(probe(kv_utilization=0.2)) == 2  # ceil(4 x 0.4)
    # replicas still provisioning count as asked for: a scale-up never asks for fewer
    assert scaler.desired(probe(serving=2, provisioning=2, kv_utilization=0.75)) == 4
    assert scaler.desired(probe(serving=2, provisioning=2, kv_utilization=1.0)) == 4
    assert scaler.desired(probe(serving=2, provisioning=2, kv_utilization=1.5)) == 6


def test_queue_slo_scales_up_on_queues_or_misses_and_down_when_idle():
    scaler = QueueSlo(QueueSloParams(queue_per_replica=4.0, max_ttft_miss_rate=0.1, scale_down_outstanding=2.0), 4)
    assert scaler.desired(probe(queue_depth=10.0)) == 10  # ceil(4 x 10 / 4)
    assert scaler.desired(probe(queue_depth=4.5)) == 5  # at least one more
    assert scaler.desired(probe(queue_depth=1.0, completions=(10, 2))) == 5  # 20% missed their TTFT SLO
    assert scaler.desired(probe(queue_depth=1.0, completions=(10, 1))) == 4  # 10%: not above the threshold
    assert scaler.desired(probe(outstanding=[1, 0, 1, 1])) == 2  # ceil(3 / 2)
    assert scaler.desired(probe(outstanding=[3, 2, 2, 2])) == 4  # busy enough: keep


def test_scheduled_follows_its_list_from_the_initial_count():
    scaler = Scheduled(ScheduleParams(schedule=[[10.0, 6], [20.0, 2]]), 4)
    assert [scaler.desired(probe(now_us=t * 10**6)) for t in (0, 9.999, 10, 15, 20, 99)] == [4, 4, 6, 6, 2, 2]
    assert scaler.wake_times_us() == (10_000_000, 20_000_000)


# ---------------------------------------------------------------------------------- routers
def ctx(n):
    return PolicyContext(n, np.random.default_rng(0), 0)


def test_routers_follow_the_candidates_when_membership_changes():
    old, new = np.arange(4), np.array([0, 2, 3, 5, 6])
    rr = RoundRobin(None, ctx(4))
    rr._next = 2  # the next pick was instance 2: it still serves, at position 1
    rr.members_changed(old, new)
    assert [rr.route(None, None) for _ in range(6)] == [1, 2, 3, 4, 0, 1]
    rnd = RandomRouter(None, ctx(4))
    rnd.route(None, None)
    rnd.members_changed(old, np.array([7, 8]))
    assert set(rnd.route(None, None) for _ in range(200)) == {0, 1}
    cost = CostEscalation(CostEscalationParams(), ctx(4))
    cost.cost[:] = [1.0, 2.0, 3.0, 4.0]
    cost.members_changed(old, new)
    assert cost.cost.tolist() == [1.0, 3.0, 4.0, 0.0, 0.0]
    sessions = SessionAffinity(LoadGuardParams(), ctx(4))
    sessions.home = {7: 1, 8: 2}  # instance 1 left; instance 2 is now at position 1
    sessions.members_changed(old, new)
    assert sessions.home == {8: 1}


# ---------------------------------------------------------------------------------- whole runs
BURST = [  # 600 requests of an MMPP burst on 2 to 6 replicas that queue at 32 sequences: about 0.5 s
    "workload=mmpp_burst", "workload.num_requests=600", "cluster.instances=2", "cluster.engine.max_num_seqs=32",
    "cluster.autoscale.max=6", "cluster.autoscale.interval_s=2", "cluster.autoscale.cooldown_s=6",
    "cluster.autoscale.provision_s=3",
]
QUEUE_SLO = [*BURST, "cluster.autoscale.kind=queue_slo", "cluster.autoscale.scale_down_outstanding=12"]


@pytest.fixture(scope="module")
def burst():
    return simulate(load_config(QUEUE_SLO))


def test_cost_equals_the_integral_of_the_replicas_that_ran(burst):
    s, df, inst = burst.summary, burst.requests, burst.instances
    pool = s["autoscale"]["pools"]["default"]
    assert pool["scale_ups"] > 0 and pool["scale_downs"] > 0
    start_ms = df["arrival_ms"].min()
    replica_hours = replica_hours_between(burst.timeline, start_ms, start_ms + s["sim"]["simulated_s"] * 1000)
    price = inst["price_usd_per_gpu_hour"].iloc[0]  # one GPU per replica, one hardware
    assert pool["gpu_hours"] == pytest.approx(replica_hours, abs=2e-6)
    assert pool["cost_usd"] == pytest.approx(replica_hours * price, abs=2e-6)
    done = df[df["status"] == "completed"]
    tokens = done["input_tokens"].sum() + done["output_tokens"].sum()
    # within the two figures' rounding: the pool's cost to 6 decimals, the per-1k figure to 9 (times 1k tokens)
    rounding = 5e-7 + 5e-10 * tokens / 1000
    assert s["cost_usd_per_1k_tokens"] * tokens / 1000 == pytest.approx(pool["cost_usd"], abs=rounding)
    assert pool["mean_replicas"] == pytest.approx(replica_hours * 3600 / s["sim"]["simulated_s"], abs=1e-4)
    busy_gpu_s = (inst["busy_ms"] * inst["gpus"]).sum() / 1000
    assert s["gpu_utilization"] == pytest.approx(busy_gpu_s / (replica_hours * 3600), abs=1e-4)


def replica_hours_between(timeline, start_ms: float, end_ms: float) -> float:
    """The integral of the replicas paid for (serving + provisioning + draining) over [start_ms, end_ms]."""
    t = timeline.to_pandas()
    edges = np.append(np.clip(t["time_ms"].to_numpy(), start_ms, end_ms), end_ms)
    replicas = (t["serving"] + t["provisioning"] + t["draining"]).to_numpy()
    return float(np.dot(replicas, np.diff(edges))) / 3.6e6


def test_with_a_measurement_window_cost_counts_the_replicas_billed_within_it(burst):
    windowed = simulate(load_config([*QUEUE_SLO, "sim.warmup_s=15", "sim.measure_s=20"]))
    first_ms = burst.requests["arrival_ms"].min()
    end_ms = first_ms + burst.summary["sim"]["simulated_s"] * 1000
    hours = replica_hours_between(burst.timeline, max(15_000, first_ms), min(35_000, end_ms))
    pool = windowed.summary["autoscale"]["pools"]["default"]
    assert pool["gpu_hours"] == pytest.approx(hours, abs=2e-6) and hours < replica_hours_between(
        burst.timeline, first_ms, end_ms
    )
    assert windowed.timeline.to_pandas().equals(burst.timeline.to_pandas())  # the run itself is the same


def test_the_same_seed_gives_identical_outputs(burst):
    again = simulate(load_config(QUEUE_SLO))
    assert summary_json(again.summary) == summary_json(burst.summary)
    assert again.timeline.to_pandas().equals(burst.timeline.to_pandas())
    assert again.requests.equals(burst.requests)


def test_autoscaled_jobs_on_ray_equal_the_same_runs_in_process(tmp_path):
    outcome = sweep_on_local_ray([*QUEUE_SLO, "seed=0,1"], tmp_path)
    assert outcome.ok == 2 and outcome.failed == 0
    for _, row in pd.read_parquet(tmp_path / "results.parquet").iterrows():
        job = tmp_path / str(row["job"])
        alone = simulate(load_config(row["overrides"].split()))
        assert (job / "summary.json").read_text() == summary_json(alone.summary)
        assert pd.read_parquet(job / "instances_timeline.parquet").equals(alone.timeline.to_pandas())


@pytest.mark.parametrize("kind", [["cluster.autoscale.kind=target_utilization", "cluster.autoscale.signal=running",
                                   "cluster.autoscale.target=8"],
                                  ["cluster.autoscale.kind=scheduled", "cluster.autoscale.schedule=[[20,5],[60,2]]"]])
def test_every_kind_runs_a_burst_to_completion(kind):
    r = simulate(load_config([*BURST, *kind]))
    assert r.summary["requests"]["completed"] == 600
    assert r.summary["autoscale"]["pools"]["default"]["scale_ups"] > 0


def test_without_autoscaling_nothing_changes_and_no_timeline_is_left(tmp_path):
    base = ["workload.num_requests=200"]
    plain = simulate(load_config(base))
    with pytest.warns(ConfigWarning) as record:  # both keys are read only when autoscale.kind is set
        unused = simulate(load_config([*base, "cluster.autoscale.max=8", "cluster.autoscale.target=0.5"]))
    assert sorted(str(w.message).split(":")[0] for w in record) == ["cluster.autoscale.max", "cluster.autoscale.target"]
    assert summary_json(unused.summary) == summary_json(plain.summary) and unused.timeline is None
    assert "autoscale" not in plain.summary
    scaled = simulate(load_config([*base, "cluster.autoscale.kind=scheduled", "cluster.autoscale.max=6",
                                   "cluster.autoscale.schedule=[[1,6]]"]))
    scaled.write(tmp_path)
    assert len(pd.read_parquet(tmp_path / "instances_timeline.parquet")) >= 2
    plain.write(tmp_path)
    assert not (tmp_path / "instances_timeline.parquet").exists()
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(summary_json(plain.summary))


@pytest.mark.parametrize("policy", ["random", "round_robin", "cost_escalation"])
def test_a_pool_that_never_changes_routes_exactly_as_a_fixed_one(policy):
    base = ["workload.num_requests=300", f"policy={policy}"]
    fixed = simulate(load_config(base))
    steady_pool = simulate(load_config([*base, "cluster.autoscale.kind=scheduled", "cluster.autoscale.max=4",
                                        "cluster.autoscale.schedule=[[1,4]]", "cluster.autoscale.interval_s=1"]))
    assert steady_pool.requests.equals(fixed.requests) and steady_pool.instances.equals(fixed.instances)


def test_each_pool_of_cluster_pools_scales_on_its_own():
    r = simulate(load_config([
        "cluster=heterogeneous", "workload.num_requests=400", "cluster.pools.1.autoscale.kind=scheduled",
        "cluster.pools.1.autoscale.max=6", "cluster.pools.1.autoscale.schedule=[[2,6]]",
        "cluster.pools.1.autoscale.provision_s=1",
    ]))
    assert list(r.summary["autoscale"]["pools"]) == ["a100"]
    assert r.summary["autoscale"]["pools"]["a100"]["scale_ups"] == 2
    a100 = r.instances[r.instances["pool"] == "a100"]
    assert len(a100) == 6 and r.requests["instance"].isin(a100["instance"].iloc[4:]).any()
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["cluster=heterogeneous", "cluster.pools.1.autoscale.kind=scheduled"]))
    assert err.value.key == "cluster.pools[1].autoscale.max"


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["cluster.autoscale.kind=bogus"], "cluster.autoscale.kind"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.schedule=[[1,2]]"], "cluster.autoscale.max"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=2", "cluster.autoscale.min=3"], "cluster.autoscale.max"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=3", "cluster.instances=5"], "cluster.instances"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=8", "cluster.autoscale.schedule=[[5,2],[5,3]]"],
         "cluster.autoscale.schedule[1][0]"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=8", "cluster.autoscale.schedule=[[5,9]]"],
         "cluster.autoscale.schedule[0][1]"),
        (["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=8"], "cluster.autoscale.schedule"),
        (["cluster.autoscale.kind=target_utilization", "cluster.autoscale.max=8", "cluster.autoscale.target=1",
          "cluster.autoscale.signal=gpu"], "cluster.autoscale.signal"),
        (["cluster.autoscale.kind=target_utilization", "cluster.autoscale.max=8"], "cluster.autoscale.target"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=8", "cluster.autoscale.interval_s=0"],
         "cluster.autoscale.interval_s"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=8", "cluster.autoscale.interval_s=0.0001"],
         "cluster.autoscale.interval_s"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=8", "cluster=heterogeneous"], "cluster.autoscale.kind"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=8", "cluster.cells.count=2"], "cluster.autoscale.kind"),
    ],
)
def test_bad_autoscaling_names_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["workload.num_requests=10", *overrides]))
    assert err.value.key == key, str(err.value)


def test_an_unknown_kind_lists_the_known_ones():
    with pytest.raises(ConfigError, match="queue_slo, scheduled, target_utilization"):
        simulate(load_config(["workload.num_requests=10", "cluster.autoscale.kind=bogus"]))
