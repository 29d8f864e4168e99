"""The batching runtime (distsim.runtime): queueing theory, hand-computed batch schedules, the batch rules on
every batch of random runs, its service curves, and bad input."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pytest
from omegaconf import OmegaConf

from distsim import load_config, simulate
from distsim.catalog import load_hardware
from distsim.catalog.runtime_models import load_runtime_model
from distsim.errors import ConfigError
from distsim.events.loop import PRIO_ARRIVAL, EventLoop
from distsim.request import Status, new_typed_request
from distsim.runtime.curves.base import CurveContext
from distsim.runtime.curves.fixed import FixedCurve
from distsim.runtime.curves.registry import CURVES
from distsim.runtime.replica import RuntimeReplica
from distsim.runtime.schema import CurveConfig


@dataclass(frozen=True)
class Pool:
    """The fields of RuntimePoolSpec a replica reads."""

    max_batch_size: int
    window_us: int
    concurrency: int
    curve: object
    serves: str = "vision"
    name: str = "p"


def run_replica(arrivals_us, items, *, max_batch: int, window_us: int, concurrency: int, curve, check=None):
    """One replica fed ``arrivals_us`` (with ``items`` each); returns (replica, requests in arrival order)."""
    loop = EventLoop()
    replica = RuntimeReplica(0, Pool(max_batch, window_us, concurrency, curve), loop)
    done = []
    replica.departure_listeners.append(lambda req, now, how: done.append(req))
    reqs = [new_typed_request(i, int(t), "vision", int(n), 224.0, None) for i, (t, n) in enumerate(zip(arrivals_us, items))]
    for req in reqs:
        loop.schedule(req.arrival_us, PRIO_ARRIVAL, lambda now, r: replica.enqueue(r, now), req)
    if check is not None:
        loop.after_event = lambda now: check(replica, now)
    loop.run()
    assert sorted(r.request_id for r in done) == list(range(len(reqs)))  # each recorded exactly once
    return replica, reqs


def reference_mdc(arrivals_us: np.ndarray, service_us: int, servers: int) -> list[int]:
    """FCFS c-server queue by hand: each request starts when it arrives or the earliest server frees."""
    free = [0] * servers
    starts = []
    for t in arrivals_us.tolist():
        earliest = heapq.heappop(free)
        start = max(t, earliest)
        starts.append(start)
        heapq.heappush(free, start + service_us)
    return starts


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_max_batch_one_is_an_m_d_c_queue_request_by_request(servers):
    rng = np.random.default_rng(servers)
    service_us = 10_000
    rate_per_us = 0.8 * servers / service_us
    arrivals = np.cumsum(rng.exponential(1 / rate_per_us, 3000)).astype(np.int64) + 1
    replica, reqs = run_replica(arrivals, [1] * len(arrivals), max_batch=1, window_us=0, concurrency=servers,
                                curve=FixedCurve(service_us))
    assert [r.first_scheduled_us for r in reqs] == reference_mdc(arrivals, service_us, servers)
    assert all(r.completion_us == r.first_scheduled_us + service_us for r in reqs)


def test_m_d_1_mean_wait_matches_pollaczek_khinchine():
    """M/D/1: Wq = rho D / (2 (1 - rho)); at rho 0.7 that is 1.1667 D."""
    rng = np.random.default_rng(7)
    d_us, rho = 10_000, 0.7
    arrivals = np.cumsum(rng.exponential(d_us / rho, 40_000)).astype(np.int64) + 1
    _, reqs = run_replica(arrivals, [1] * len(arrivals), max_batch=1, window_us=0, concurrency=1, curve=FixedCurve(d_us))
    wait = np.mean([r.first_scheduled_us - r.arrival_us for r in reqs])
    expected = rho * d_us / (2 * (1 - rho))
    assert wait == pytest.approx(expected, rel=0.06)


def test_a_hand_computed_batch_schedule():
    """max 4 items, window 10 ms, one slot, 30 ms per batch. Requests at 0, 1, 2 ms wait out the window and
    leave together at 10; 12..15 fill a batch at 15 but the slot is busy until 40; 16 waits for the next
    slot (70), its window long gone. At 201 a 3-item request cannot join the 2-item head (no skipping), so
    the head's batch can grow no more and leaves at once; the 3-item one waits for the slot (231)."""
    ms = 1000
    arrivals = [0, 1, 2, 12, 13, 14, 15, 16, 200, 201]
    items = [1, 1, 1, 1, 1, 1, 1, 1, 2, 3]
    replica, reqs = run_replica([t * ms for t in arrivals], items, max_batch=4, window_us=10 * ms, concurrency=1,
                                curve=FixedCurve(30 * ms))
    got = [(b.start_us // ms, [r.request_id for r in b.requests], b.items, b.full) for b in replica.batches]
    assert got == [(10, [0, 1, 2], 3, False), (40, [3, 4, 5, 6], 4, True), (70, [7], 1, False),
                   (201, [8], 2, True), (231, [9], 3, False)]
    assert reqs[7].completion_us == 100 * ms


def test_a_window_of_zero_sends_what_is_queued_when_a_slot_frees():
    ms = 1000
    replica, _ = run_replica([0, 1 * ms, 2 * ms, 3 * ms], [1, 1, 1, 1], max_batch=8, window_us=0, concurrency=1,
                             curve=FixedCurve(5 * ms))
    assert [(b.start_us, len(b.requests)) for b in replica.batches] == [(0, 1), (5 * ms, 3)]


def test_a_request_larger_than_the_batch_is_dropped():
    replica, reqs = run_replica([0, 10], [9, 1], max_batch=8, window_us=0, concurrency=1, curve=FixedCurve(100))
    assert reqs[0].status == Status.DROPPED and reqs[1].status == Status.COMPLETED
    assert replica.stats.dropped == 1


def _check_batch_rules(replica, window_us, concurrency):
    """Every batch: at most max items; it started within its oldest request's window, or later only because
    every slot was busy at the window's end and it started the moment one freed."""
    batches = replica.batches
    ends = {b.end_us for b in batches}
    for b in batches:
        assert 1 <= b.items <= replica.batcher.max_items
        deadline = b.oldest_us + window_us
        if b.start_us > deadline:
            assert b.start_us in ends
            busy = sum(1 for o in batches if o.start_us <= deadline < o.end_us)
            assert busy == concurrency


@pytest.mark.parametrize("seed", range(6))
def test_batches_never_exceed_the_maximum_and_close_no_later_than_the_window(seed):
    rng = np.random.default_rng(seed)
    max_batch, window_us, conc = int(rng.integers(1, 9)), int(rng.integers(0, 20_000)), int(rng.integers(1, 4))
    arrivals = np.cumsum(rng.exponential(2_000, 800)).astype(np.int64)
    items = rng.integers(1, max_batch + 1, 800)
    curve = CURVES.get("table")(
        OmegaConf.structured(CurveConfig(kind="table", batch_sizes=[1, 8], sizes=[224.0], ms=[[3.0], [12.0]])),
        CurveContext(None, None, max_batch, "k"),
    )

    def every_event(replica, now):
        replica.check_invariants()

    replica, _ = run_replica(arrivals, items, max_batch=max_batch, window_us=window_us, concurrency=conc, curve=curve,
                             check=every_event)
    _check_batch_rules(replica, window_us, conc)


def test_table_curve_interpolates_in_both_directions_and_clamps_sizes():
    cfg = OmegaConf.structured(CurveConfig(kind="table", batch_sizes=[1, 4], sizes=[224.0, 448.0], ms=[[2.0, 6.0], [5.0, 15.0]]))
    curve = CURVES.get("table")(cfg, CurveContext(None, None, 4, "k"))
    assert curve.batch_us(1, 224) == 2000 and curve.batch_us(4, 448) == 15000
    assert curve.batch_us(2, 224) == 3000  # a third of the way from 1 to 4
    assert curve.batch_us(1, 336) == 4000
    assert curve.batch_us(1, 1000) == 6000  # beyond the grid's sizes: the last column


def test_roofline_curve_grows_with_batch_and_image_size_and_speech_with_audio():
    h100 = load_hardware("H100")
    cfg = OmegaConf.structured(CurveConfig())
    vit = CURVES.get("roofline")(cfg, CurveContext(load_runtime_model("vit-b-16", "k"), h100, 64, "k"))
    assert vit.batch_us(1, 224) < vit.batch_us(64, 224) < vit.batch_us(64, 448)
    # 64 images of 35.12 GFLOP at 40% of 989 TFLOP/s, plus 0.5 ms
    assert vit.batch_us(64, 224) == round(500 + 64 * 35.12e9 / (989e12 * 0.4) * 1e6)
    whisper = CURVES.get("roofline")(cfg, CurveContext(load_runtime_model("whisper-large-v3", "k"), h100, 8, "k"))
    assert whisper.batch_us(1, 5) < whisper.batch_us(1, 20)


LLM = "{name:llm,count:1}"
VIS = "name:vis,kind:runtime,model:resnet-50"


def pools(runtime: str, llm: str = LLM) -> list[str]:
    """Overrides for a vLLM pool and a runtime pool (``runtime``: extra keys of the runtime pool)."""
    return [f"cluster.pools=[{llm},{{{VIS}{',' if runtime else ''}{runtime}}}]", "workload.num_requests=5"]


@pytest.mark.parametrize(
    "runtime, key",
    [
        ("runtime:{max_batch_size:0}", "cluster.pools[1].runtime.max_batch_size"),
        ("runtime:{batch_window_ms:-1}", "cluster.pools[1].runtime.batch_window_ms"),
        ("runtime:{concurrency:0}", "cluster.pools[1].runtime.concurrency"),
        ("runtime:{concurrency:10000}", "cluster.pools[1].runtime.concurrency"),
        ("model:bert", "cluster.pools[1].model"),
        ("kind:triton", "cluster.pools[1].kind"),
        ("runtime:{curve:{kind:magic}}", "cluster.pools[1].runtime.curve.kind"),
        ("runtime:{curve:{kind:fixed}}", "cluster.pools[1].runtime.curve.batch_ms"),
        ("runtime:{curve:{kind:table}}", "cluster.pools[1].runtime.curve.batch_sizes"),
        ("runtime:{curve:{kind:table,batch_sizes:[1,4],sizes:[224],ms:[[1],[2]]},max_batch_size:8}",
         "cluster.pools[1].runtime.curve.batch_sizes"),
        ("runtime:{curve:{kind:table,batch_sizes:[4,1],sizes:[224],ms:[[1],[2]]}}", "cluster.pools[1].runtime.curve.batch_sizes"),
        ("runtime:{curve:{kind:table,batch_sizes:[1,8],sizes:[224],ms:[[1]]}}", "cluster.pools[1].runtime.curve.ms"),
        ("runtime:{curve:{compute_efficiency:2}}", "cluster.pools[1].runtime.curve.compute_efficiency"),
        ("runtime:{serves:llm}", "cluster.pools[1].runtime.serves"),
        ("name:llm2,engine:{max_num_seqs:4}", "cluster.pools[1].engine"),
        ("role:prefill", "cluster.pools[1].role"),
    ],
)
def test_bad_runtime_settings_are_one_config_error_naming_the_key(runtime, key):
    with pytest.raises(ConfigError) as err:
        simulate(load_config(pools(runtime)))
    assert err.value.key == key


@pytest.mark.parametrize(
    "overrides, key",
    [
        (pools("", llm="{name:vis,count:1}"), "cluster.pools[1].name"),
        (pools("", llm="{name:llm,count:1,model:resnet-50}"), "cluster.pools[0].model"),
        ([*pools("", llm="{name:llm,count:2}"), "cluster.cells.count=2"], "cluster.pools[1].kind"),
    ],
)
def test_runtime_pools_with_what_is_not_modelled_are_refused(overrides, key):
    with pytest.raises(ConfigError) as err:
        simulate(load_config(overrides))
    assert err.value.key == key


def test_only_runtime_pools_is_refused():
    cfg = load_config(["cluster.pools=[{name:vis,kind:runtime,model:resnet-50}]", "workload.num_requests=5"])
    with pytest.raises(ConfigError) as err:
        simulate(cfg)
    assert err.value.key == "cluster.pools"


def test_runtime_replicas_on_mig_slices_share_gpus_with_llm_slices_and_are_billed_their_share():
    cfg = load_config([
        "cluster.pools=[{name:llm,count:2,hardware:H100,mig:{profile:3g.40gb}},"
        "{name:vis,kind:runtime,model:vit-b-16,count:3,hardware:H100,mig:{profile:1g.10gb}}]",
        "workload.mix={llm:0.5,vision:0.5}", "workload.num_requests=60",
    ])
    result = simulate(cfg)
    inst = result.instances
    assert inst["mig_profile"].tolist() == ["3g.40gb"] * 2 + ["1g.10gb"] * 3
    for _gpu, rows in inst.groupby("mig_gpu"):  # every sliced GPU is billed exactly once
        assert rows["gpu_fraction"].sum() == pytest.approx(1.0)
        assert rows["price_usd_per_gpu_hour"].sum() == pytest.approx(load_hardware("H100").price_usd_per_gpu_hour)
    assert inst["mig_gpu"].nunique() == 2  # 3g + 3g + 1g on one GPU, the other two 1g on a second
    assert (result.requests["status"] == "completed").all()


def test_runtime_slices_alone_add_the_mig_columns_and_whole_llm_gpus_count_one():
    result = simulate(load_config([
        "cluster.pools=[{name:llm,count:1},{name:vis,kind:runtime,model:resnet-50,count:7,mig:{profile:1g.10gb}}]",
        "workload.mix={llm:0.5,vision:0.5}", "workload.num_requests=40",
    ]))
    inst = result.instances
    assert inst["gpu_fraction"].tolist() == [1.0] + [pytest.approx(1 / 7)] * 7
    assert inst.loc[inst["role"] == "runtime", "mig_gpu"].nunique() == 1


def test_a_model_that_does_not_fit_its_slice_is_refused_naming_the_profile():
    with pytest.raises(ConfigError) as err:
        simulate(load_config([
            "cluster.pools=[{name:llm,count:1},{name:asr,kind:runtime,model:whisper-large-v3,mig:{profile:1g.10gb},"
            "runtime:{concurrency:4}}]", "workload.num_requests=5",
        ]))
    assert err.value.key == "cluster.pools[1].mig.profile"
