"""The cell layer (cluster.cells): a front router over cells, summaries with their own staleness, round
trips from Vivaldi-style coordinates, spill-over between cells, per-cell outputs (INV-16 to INV-18)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from clikit import assert_user_error, run_module
from simkit import FAKE_HW, engine, run, tiny_model

from distsim import load_config, simulate
from distsim.cluster.pools import PoolSpec
from distsim.errors import ConfigError, ConfigWarning, SimulationError
from distsim.events.rng import stream
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request
from distsim.resolve import resolve
from distsim.runner.rows import flatten
from distsim.simulate import summary_json

PARAMS = engine(max_num_seqs=4, max_num_batched_tokens=512, block_size=16, total_kv_blocks=4000)
LAT = LinearLatency(2000.0, 2.0, 100.0)
SMALL = ["workload.num_requests=300", "cluster.instances=4"]
STALE = dict(summary_interval_ms=200, summary_jitter_ms=20, summary_delay_ms=30)
NETWORK = dict(rtt__spread_ms=20, rtt__height_ms=2, rtt__jitter_ms=1)


def poisson(n: int, rate: float, seed: int = 0, prompt=(50, 400), output=(10, 200)) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1e6 / rate, n)).astype(np.int64)
    return [Request(i, int(t[i]), int(rng.integers(*prompt)), int(rng.integers(*output))) for i in range(n)]


def peaks(spilled: dict) -> tuple[dict, dict]:
    """A probe for simkit.run: invariants after every event, and per cell the most requests it held, in
    all and beyond those it kept while saturated."""
    held: dict[int, int] = {}
    unforced: dict[int, int] = {}

    def probe(sim, now):
        fleet = sim.cluster
        fleet.check_invariants()
        for c, inside in enumerate(fleet.directory.inside):
            held[c] = max(held.get(c, 0), inside)
            unforced[c] = max(unforced.get(c, 0), inside - len(fleet._forced[c]))

    spilled["probe"] = probe
    return held, unforced


# ---------------------------------------------------------------------------------------- no cell layer
def test_one_cell_is_no_cell_layer_and_changes_no_output_byte():
    plain = simulate(load_config(SMALL))
    with pytest.warns(ConfigWarning, match="cluster.cells.count: is 1"):
        one = simulate(load_config([*SMALL, "cluster.cells.count=1", "cluster.cells.spill.threshold=1",
                                    "cluster.cells.rtt.spread_ms=50", "cluster.cells.front_policy=nearest"]))
    assert summary_json(one.summary) == summary_json(plain.summary)
    pd.testing.assert_frame_equal(one.requests, plain.requests)
    pd.testing.assert_frame_equal(one.instances, plain.instances)
    assert "cells" not in one.summary and "cell" not in one.requests and "cell" not in one.instances
    assert one.cells is None


# ---------------------------------------------------------------------------------------- an idle cell
@pytest.mark.parametrize("front", ["round_robin", "nearest"])
def test_a_cell_that_gets_no_request_reports_zero_and_null_percentiles(tmp_path, front):
    """Two requests on four cells: two cells are idle. Their rows say zero requests and null (never NaN)
    latencies, and the run writes every output (it used to crash writing summary.json)."""
    proc = run_module("distsim", "cluster.cells.count=4", "workload.num_requests=2",
                      f"cluster.cells.front_policy={front}", f"hydra.run.dir={tmp_path}", "sim.progress=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    rows = summary["cells"]["per_cell"]
    idle = [row for row in rows if row["routed"] + row["spilled_in"] == 0]
    assert len(idle) >= 2
    for row in idle:
        assert row["accepted"] == row["completed"] == 0
        assert row["ttft_ms_mean"] is row["ttft_ms_p99"] is row["e2e_ms_mean"] is row["e2e_ms_p99"] is None
        assert row["gpu_utilization"] == 0.0
    table = pd.read_parquet(tmp_path / "cells.parquet")
    assert table["ttft_ms_p99"].isna().sum() == len(idle)
    assert sum(row["completed"] for row in rows) == 2


# ---------------------------------------------------------------------------------------- conservation
@pytest.mark.parametrize("front", ["round_robin", "random", "least_loaded", "nearest"])
def test_a_two_level_run_conserves_requests_after_every_event(front):
    cells = dict(count=4, front_policy=front, spill__threshold=2, **STALE, **NETWORK)
    sim = run(poisson(400, 60.0), PARAMS, LAT, instances=8, routing="least_loaded", check_every_event=True, cells=cells)
    fleet, table = sim.cluster, sim.recorder.table()
    assert sim.checks > 1000
    assert len(table) == 400 and table["request_id"].is_unique and (table["status"] == "completed").all()
    assert sum(fleet.routed) == 400 and fleet.arrived == 400
    assert sum(fleet.spilled_out) == sum(fleet.spilled_in)
    assert [cell.arrived for cell in fleet.cells] == [
        fleet.routed[c] + fleet.spilled_in[c] - fleet.spilled_out[c] for c in range(4)
    ]
    assert fleet.directory.summaries > 0


def test_each_cell_has_its_own_prefill_and_decode_pools_and_dp_groups():
    pools = [
        PoolSpec("prefill", 2, "prefill", FAKE_HW, tiny_model(1000), 1, PARAMS, LAT, "cluster.pools[0]"),
        PoolSpec("decode", 4, "decode", FAKE_HW, tiny_model(1000), 1, PARAMS, LAT, "cluster.pools[1]", 2),
    ]
    sim = run(poisson(200, 40.0), pools=pools, check_every_event=True, cells=dict(count=2, **NETWORK))
    fleet = sim.cluster
    assert [[(i.index, i.role, i.dp_group) for i in cell.instances] for cell in fleet.cells] == [
        [(0, "prefill", 0), (1, "decode", 1), (2, "decode", 1), (3, "decode", 2), (4, "decode", 2)],
        [(5, "prefill", 3), (6, "decode", 4), (7, "decode", 4), (8, "decode", 5), (9, "decode", 5)],
    ]
    table = sim.recorder.table()
    assert (table["status"] == "completed").all()
    cell_of = {i.index: c for c, cell in enumerate(fleet.cells) for i in cell.instances}
    assert all(cell_of[p] == cell_of[d] for p, d in zip(table["prefill_instance"], table["instance"]))


def test_the_checks_catch_a_request_counted_twice_or_passed_too_often():
    caught = []

    def tamper(sim, now):
        fleet = sim.cluster
        sim.checks += 1
        if sim.checks != 100:
            return
        fleet.check_invariants()
        fleet.directory.inside[1] += 1
        with pytest.raises(SimulationError, match="INV-16"):
            fleet.check_invariants()
        fleet.directory.inside[1] -= 1
        fleet._wire[10**6] = (poisson(1, 1.0)[0], 0, (1, 0))  # passed two cells with max_hops 1
        with pytest.raises(SimulationError, match="INV-17"):
            fleet.check_invariants()
        del fleet._wire[10**6]
        fleet.check_invariants()
        caught.append(now)

    run(poisson(60, 40.0), PARAMS, LAT, instances=4, cells=dict(count=2, rtt__spread_ms=50), after_event=tamper)
    assert caught


# ---------------------------------------------------------------------------------------- herding and spill-over
def burst(spill: float | None, front: str = "nearest") -> tuple:
    """120 requests in about 150 ms onto 4 cells of 2 instances whose summaries are 1 s stale."""
    cells = dict(count=4, front_policy=front, summary_interval_ms=1000, rtt__spread_ms=40)
    if spill is not None:
        cells["spill__threshold"] = spill
    probe: dict = {}
    held, unforced = peaks(probe)
    sim = run(poisson(120, 800.0, seed=1, prompt=(50, 300), output=(20, 100)), PARAMS, LAT, instances=8,
              routing="least_loaded", cells=cells, after_event=lambda s, now: probe["probe"](s, now))
    return sim, held, unforced


def test_a_stale_summary_herds_a_burst_onto_one_cell_and_spill_over_bounds_it():
    herded, held, _ = burst(None)
    routed = herded.cluster.routed
    assert max(routed) / sum(routed) >= 0.9  # the nearest cell looks empty for a whole second
    assert max(held.values()) / 2 > 2 * 20  # far beyond what the threshold below allows per instance

    spilled, held, unforced = burst(20.0)
    fleet = spilled.cluster
    assert max(fleet.routed) / sum(fleet.routed) >= 0.9  # the front still herds ...
    assert sum(fleet.spilled_out) > 0 and sum(fleet.kept_saturated) == 0  # ... the cell passes the excess on
    for c in range(4):  # no cell holds more than its threshold allows (INV-18), the fleet having room
        assert held[c] <= math.floor(20.0 * 2) + 1 + fleet.kept_saturated[c]
        assert unforced[c] <= math.floor(20.0 * 2) + 1
    ttft = spilled.recorder.table()["ttft_ms"].quantile(0.99)
    assert ttft < 0.5 * herded.recorder.table()["ttft_ms"].quantile(0.99)


def test_a_least_loaded_front_counts_its_own_sends_and_does_not_herd():
    sim, held, _ = burst(None, front="least_loaded")
    assert sim.cluster.routed == [30, 30, 30, 30]
    assert max(held.values()) <= 30


def test_a_cell_keeps_what_it_cannot_pass_on_and_says_so():
    sim, held, unforced = burst(5.0)  # the whole fleet's threshold (40 requests) is below the burst
    fleet = sim.cluster
    assert sum(fleet.kept_saturated) > 0
    assert all(unforced[c] <= 5 * 2 + 1 for c in range(4))
    assert len(sim.recorder) == 120


# ---------------------------------------------------------------------------------------- round trips
def vivaldi_rtt_us(seed: int, cells: int, dims: int, spread_ms: float, height_ms: float) -> np.ndarray:
    """The round trips the coordinates give, computed here from the documented rule."""
    rng = stream(seed, "cells/coordinates")
    points = rng.random((cells + 1, dims)) * spread_ms
    heights = rng.random(cells + 1) * height_ms
    front = cells
    return np.array([
        round((math.dist(points[front], points[c]) + heights[front] + heights[c]) * 1000) for c in range(cells)
    ])


@pytest.mark.parametrize("jitter_ms", [0.0, 1.0])
def test_the_round_trip_to_a_cell_adds_exactly_to_ttft_and_e2e(jitter_ms):
    reqs = lambda: [Request(i, i * 2_000_000, 200, 20) for i in range(8)]  # noqa: E731  one at a time
    base = run(reqs(), PARAMS, LAT, instances=4, cells=dict(count=4))
    far = run(reqs(), PARAMS, LAT, instances=4, seed=3,
              cells=dict(count=4, rtt__dims=2, rtt__spread_ms=30, rtt__height_ms=5, rtt__jitter_ms=jitter_ms))
    rtt = far.cluster.network.front_rtt_us
    assert rtt.tolist() == vivaldi_rtt_us(3, 4, 2, 30.0, 5.0).tolist()
    assert len(set(rtt.tolist())) == 4 and rtt.min() > 0
    a, b = base.recorder.table(), far.recorder.table()
    expected = np.tile(rtt, 2) / 1000.0  # round robin: request i went to cell i % 4
    for col in ("ttft_ms", "e2e_ms"):
        delta = (b[col] - a[col]).to_numpy()
        if jitter_ms:  # each way adds up to jitter_ms
            assert np.all(delta >= expected - 1e-9) and np.all(delta <= expected + 2 * jitter_ms + 1e-9)
        else:
            np.testing.assert_allclose(delta, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a["tpot_ms"], b["tpot_ms"])  # every token is shifted alike


# ---------------------------------------------------------------------------------------- whole runs
CELLS = ["cluster.instances=8", "cluster.cells.count=4", "cluster.cells.front_policy=random",
         "cluster.cells.summary_interval_ms=100", "cluster.cells.summary_jitter_ms=30",
         "cluster.cells.summary_delay_ms=10", "cluster.cells.rtt.spread_ms=15", "cluster.cells.rtt.height_ms=2",
         "cluster.cells.rtt.jitter_ms=0.5", "cluster.cells.spill.threshold=4", "policy=least_loaded",
         "workload.num_requests=400", "workload.arrival.rate_rps=60"]


def test_same_seed_gives_identical_outputs_and_per_cell_figures_add_up():
    a = simulate(load_config(CELLS))
    b = simulate(load_config(CELLS))
    assert summary_json(a.summary) == summary_json(b.summary)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.cells, b.cells)
    other = simulate(load_config([*CELLS, "seed=1"]))
    assert summary_json(other.summary) != summary_json(a.summary)
    cells, req, inst = a.cells, a.requests, a.instances
    assert cells["cell"].tolist() == [0, 1, 2, 3] and cells["instances"].tolist() == [2] * 4
    assert cells["routed"].sum() == 400 and cells["completed"].sum() == a.summary["requests"]["completed"]
    assert req.groupby("cell").size().to_dict() == dict(zip(cells["cell"], cells["accepted"]))
    assert inst["cell"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert (req["cell"] == inst.set_index("instance").loc[req["instance"], "cell"].to_numpy()).all()
    assert a.summary["cells"]["count"] == 4 and len(a.summary["cells"]["per_cell"]) == 4
    row = flatten(a.summary)  # a sweep's results.parquet: the per-cell rows as one JSON column
    assert row["cells.spilled"] == cells["spilled_out"].sum()
    assert json.loads(row["cells.per_cell"]) == a.summary["cells"]["per_cell"]


def test_decisions_name_global_instances():
    result = simulate(load_config([*CELLS, "policy.trace_decisions=true"]))
    decisions = result.decisions.set_index("request_id")["instance"]
    req = result.requests.set_index("request_id")
    assert (decisions.loc[req.index] == req["instance"]).all()


@pytest.mark.parametrize("override, key", [
    ("cluster.cells.count=3", "cluster.cells.count"),
    ("cluster.cells.count=0", "cluster.cells.count"),
    ("cluster.cells.front_policy=nope", "cluster.cells.front_policy"),
    ("cluster.cells.summary_interval_ms=-1", "cluster.cells.summary_interval_ms"),
    ("cluster.cells.summary_delay_ms=-5", "cluster.cells.summary_delay_ms"),
    ("cluster.cells.summary_delay_ms=5", "cluster.cells.summary_delay_ms"),  # needs an interval
    ("cluster.cells.summary_jitter_ms=5", "cluster.cells.summary_jitter_ms"),  # not below the interval
    ("cluster.cells.rtt.jitter_ms=-1", "cluster.cells.rtt.jitter_ms"),
    ("cluster.cells.rtt.spread_ms=-1", "cluster.cells.rtt.spread_ms"),
    ("cluster.cells.rtt.dims=0", "cluster.cells.rtt.dims"),
    ("cluster.cells.spill.threshold=0", "cluster.cells.spill.threshold"),
    ("cluster.cells.spill.max_hops=0", "cluster.cells.spill.max_hops"),
])
def test_a_bad_cells_value_is_one_error_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        resolve(load_config(["cluster.instances=4", "cluster.cells.count=2", override]))
    assert err.value.key == key


def test_a_count_that_does_not_divide_a_pool_names_the_pool():
    with pytest.raises(ConfigError, match=r"cluster.cells.count: 4 cells do not divide pool 'prefill' "
                                          r"\(cluster.pools\[0\].count=2\)"):
        resolve(load_config(["cluster=pd_disagg", "cluster.cells.count=4"]))


def test_the_cli_runs_cells_and_writes_cells_parquet(tmp_path):
    proc = run_module("distsim", "cluster.instances=4", "cluster.cells.count=4", "workload.num_requests=100",
                      "cluster.cells.rtt.spread_ms=10", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = pd.read_parquet(tmp_path / "cells.parquet")
    assert cells["cell"].tolist() == [0, 1, 2, 3] and cells["routed"].sum() == 100
    assert "cell" in pd.read_parquet(tmp_path / "requests.parquet")
    assert "cell" in pd.read_parquet(tmp_path / "instances.parquet")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["cells"]["per_cell"][0]["rtt_ms"] == cells["rtt_ms"][0]
    bad = run_module("distsim", "cluster.instances=4", "cluster.cells.count=3", f"hydra.run.dir={tmp_path}/bad")
    assert_user_error(bad, 2, "cluster.cells.count", "'default'")


# ---------------------------------------------------------------------------------------- scale
def test_inter_token_gaps_tallied_in_chunks_give_the_distribution_of_the_raw_samples(monkeypatch):
    """A 131,072-instance run has over 100 million gaps: itl_samples tallies them a chunk at a time
    (distinct gap, summed weight) instead of concatenating and sorting them all; same figures."""
    from distsim.metrics import tables
    from distsim.metrics.summary import weighted_distribution

    rng = np.random.default_rng(5)
    chunks = [(rng.integers(1, 400, size=n), rng.integers(1, 9, size=n)) for n in rng.integers(0, 300, size=40)]
    monkeypatch.setattr(tables, "ITL_CHUNK", 500)  # many merges
    tally = tables.Tally()
    for values, weights in chunks:
        tally.add(values, weights)
    values, weights = tally.result()
    raw_v = np.concatenate([v for v, _ in chunks]).astype(np.float64)
    raw_w = np.concatenate([w for _, w in chunks]).astype(np.float64)
    assert values.tolist() == sorted(set(raw_v.tolist())) and weights.sum() == raw_w.sum()
    assert weighted_distribution(values / 1000.0, weights) == weighted_distribution(raw_v / 1000.0, raw_w)
