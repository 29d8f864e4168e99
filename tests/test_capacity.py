"""Capacity as a fitness: the bisection finds a rate known in closed form, is deterministic, and refuses bad
settings with one line."""

from __future__ import annotations

import json

import pytest
from clikit import assert_user_error, run_module

from distsim import load_config, simulate
from distsim.metrics.capacity import CapacitySearch, Trial
from distsim.request import Request

# linear step times (DESIGN.md): base 1 ms, 0.1 ms per prefill token, 0.2 ms per decode token; one sequence
# at a time, so a request of P prompt and D output tokens holds its instance exactly
# S = (1000 + 100 P) + (D - 1) (1000 + 200) us; no front end.
LINEAR = [
    "cluster.latency.kind=linear", "cluster.latency.base_us=1000", "cluster.latency.per_prefill_token_us=100",
    "cluster.latency.per_decode_token_us=200", "cluster.frontend.per_input_token_us=0",
    "cluster.engine.max_num_seqs=1", "cluster.engine.enable_prefix_caching=false", "policy=round_robin",
]  # fmt: skip
P, D, C, N = 10, 10, 2, 200
S_US = (1000 + 100 * P) + (D - 1) * 1200  # 12,800 us
PREFILL_US = 1000 + 100 * P


def _deterministic(interval_us: int) -> list[Request]:
    return [Request(i, i * interval_us, P, D) for i in range(N)]


def test_capacity_matches_the_closed_form_of_a_deterministic_fleet():
    """C instances, round robin, arrivals every a us: each instance sees one request every C a us, and when
    C a < S its k-th request waits k d, d = S - C a. With the TTFT SLO at prefill + delta, request k meets it
    iff k d <= delta; a share s of n = N / C requests per instance meets it iff d <= delta / (ceil(s n) - 1).
    So the capacity is C / (S - delta / (ceil(s n) - 1)) requests per us."""
    share, delta_us = 0.9, 8_900  # ceil(0.9 x 100) - 1 = 89: d* = 100 us
    d_star = delta_us / (90 - 1)
    known_rps = C * 1e6 / (S_US - d_star)  # 157.48 req/s, one GPU per instance
    cfg = load_config([*LINEAR, f"cluster.instances={C}", "fitness=capacity", f"fitness.share={share}",
                       "fitness.tolerance=0.005", "fitness.max_steps=16",
                       f"workload.slo.ttft_ms={(PREFILL_US + delta_us) / 1000}", "workload.slo.tpot_ms=100"])  # fmt: skip
    result = simulate(cfg, requests=_deterministic(20_000))  # 50 req/s offered: every request meets
    cap = result.summary["capacity"]
    assert result.summary["goodput"]["slo_attainment"] == 1.0
    assert cap["converged"]
    assert known_rps / 1.005 <= cap["requests_per_s"] <= known_rps
    assert cap["bracket_rps"][1] > known_rps
    assert cap["roofline_rps"] >= known_rps  # optimistic, as a bracket's first guess must be
    assert result.summary["fitness"] == pytest.approx(cap["requests_per_s"] / C, rel=1e-4)
    assert cap["runs"] <= 1 + 16


def test_the_bisection_stops_within_tolerance_or_max_steps():
    def trial(factor: float) -> Trial:
        return Trial(factor, factor, 1.0 if factor <= 3.0 else 0.0)

    lo, hi, runs = CapacitySearch(0.9, 0.02, 20).run(trial, trial(1.0), roofline_factor=10.0)
    assert lo.factor <= 3.0 < hi.factor and hi.factor / lo.factor <= 1.02
    lo, hi, runs = CapacitySearch(0.9, 0.02, 3).run(trial, trial(1.0), roofline_factor=10.0)
    assert runs == 3
    lo, hi, runs = CapacitySearch(0.9, 0.02, 20).run(trial, trial(8.0), roofline_factor=10.0)  # start above: halve
    assert lo.factor <= 3.0 < hi.factor
    lo, hi, runs = CapacitySearch(0.9, 0.02, 20).run(trial, trial(1.0), roofline_factor=2.5)  # meets at the roofline
    assert (lo.factor, hi, runs) == (2.5, None, 2)


def test_capacity_is_deterministic(tmp_path):
    args = ["fitness=capacity", "workload.num_requests=300", "sim.progress=false"]
    a = run_module("distsim", *args, f"hydra.run.dir={tmp_path / 'a'}")
    b = run_module("distsim", *args, f"hydra.run.dir={tmp_path / 'b'}")
    assert b.returncode == 0, b.stderr[-2000:]
    assert a.returncode == 0, a.stderr[-2000:]
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()
    assert "capacity " in a.stdout


@pytest.mark.parametrize(
    ("override", "key"),
    [("fitness.share=0", "fitness.share"), ("fitness.share=1.5", "fitness.share"),
     ("fitness.tolerance=0", "fitness.tolerance"), ("fitness.tolerance=-0.1", "fitness.tolerance"),
     ("fitness.max_steps=0", "fitness.max_steps")],
)  # fmt: skip
def test_bad_capacity_settings_are_one_line(tmp_path, override, key):
    proc = run_module("distsim", "fitness=capacity", override, f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, key)


def test_the_search_takes_capacity_as_its_fitness():
    """The routing search's tail-latency fitness (conf/search_routing.yaml) is a group option: fitness=capacity
    replaces it whole (no weights left over to warn about); the default search (conf/search.yaml) is capacity,
    resolved to 0.5%."""
    from distsim.resolve import resolve

    scenario = resolve(load_config(["fitness=capacity"], config_name="search_routing"))
    assert scenario.fitness.kind == "capacity" and scenario.fitness.weights == {}
    default = resolve(load_config([], config_name="search")).fitness
    assert default.kind == "capacity" and default.tolerance == 0.005 and default.weights == {}


@pytest.mark.parametrize(
    "extra",
    [["workload.arrival.rate_rps=8"],  # the bracket doubles past the capacity: the trials above it stop
     ["workload.arrival.rate_rps=8", "sim.warmup_s=5", "sim.measure_s=20", "sim.drain_s=5"],  # a window
     ["cluster=pd_disagg", "workload.arrival.rate_rps=4"],  # the first token is the KV's landing
     ["workload=multi_tenant", "cluster.instances=1", "workload.arrival.rate_rps=2", "workload.num_requests=1500",
      "cluster.frontend.per_output_token_us=300"]],
)  # fmt: skip
def test_stopping_failed_trials_early_changes_nothing_but_the_cost(extra):
    """A trial stops only once its failure is certain, so the capacity, its bracket and the attainment
    reported are those of trials run to their end."""
    base = ["fitness=capacity", "workload.num_requests=500", *extra]
    on = simulate(load_config([*base, "fitness.stop_early=true"])).summary
    off = simulate(load_config([*base, "fitness.stop_early=false"])).summary
    assert on["capacity"].pop("stopped_early") > 0 and off["capacity"].pop("stopped_early") == 0
    assert on == off


def test_the_miss_count_agrees_with_the_request_table():
    """Recorder.met_slo, which the early stop counts with, is the table's met_slo request by request
    (a front-end lag and per-class SLOs included)."""
    from distsim.probe import RunProbe

    class Heard(RunProbe):
        def built(self, world, loop, recorder):
            self.met = {}
            world.record_listeners.append(lambda req: self.met.setdefault(req.request_id, recorder.met_slo(req)))

    probe = Heard()
    cfg = load_config(["workload=multi_tenant", "workload.num_requests=400", "workload.arrival.rate_rps=60", "cluster.instances=1",
                       "cluster.frontend.per_output_token_us=300"])  # fmt: skip
    table = simulate(cfg, probe=probe).requests
    assert 0 < table["met_slo"].sum() < len(table)
    assert probe.met == dict(zip(table["request_id"].tolist(), table["met_slo"].tolist()))


def test_capacity_with_nothing_measured_is_null_with_its_reason(tmp_path):
    """A measurement window no trial can fill (it scales with the arrivals) measures no request at any
    load: the capacity and the fitness are null with the reason, never 0.0, and no trial runs for it."""
    proc = run_module("distsim", "fitness=capacity", "sim.warmup_s=100000", "workload.num_requests=200",
                      "sim.progress=false", f"hydra.run.dir={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    cap = summary["capacity"]
    assert cap["requests_per_s"] is None and summary["fitness"] is None
    assert cap["bracket_rps"] == [None, None] and cap["runs"] == 1 and not cap["converged"]
    assert "measurement window" in cap["not_measured"]
    assert "capacity      not measured: no request arrived in the measurement window" in proc.stdout
