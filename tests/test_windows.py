"""Measurement windows (sim.warmup_s, sim.measure_s, sim.drain_s): which requests count, what the summary
figures are over, where the run stops, that the defaults change nothing, and the bad inputs.

Runs are small (300 requests of the default workload, about 12 s of arrivals at 25 req/s)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from clikit import assert_user_error, run_module
from raykit import sweep_on_local_ray

from distsim import load_config, simulate
from distsim.errors import ConfigError, ConfigWarning
from distsim.metrics.settings import MeasureWindow
from distsim.metrics.summary import distribution, rnd
from distsim.resolve import resolve
from distsim.simulate import run as simulate_run
from distsim.simulate import summary_json

SMALL = ["workload.num_requests=300"]


def run(*overrides: str):
    return simulate(load_config([*SMALL, *overrides]))


def without_measured(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["measured"])


def test_warmup_excludes_exactly_the_requests_arriving_before_it():
    result = run("sim.warmup_s=3")
    rows = result.requests
    assert ((rows["arrival_ms"] >= 3000.0) == rows["measured"]).all()
    before = int((rows["arrival_ms"] < 3000.0).sum())
    assert 0 < before < len(rows)
    window = result.summary["window"]
    assert window["measured"] == result.summary["requests"]["arrived"] == len(rows) - before
    assert (window["start_ms"], window["end_ms"], window["excluded_before"], window["excluded_after"]) == (
        3000.0, None, before, 0
    )  # fmt: skip


def test_the_window_end_excludes_the_requests_arriving_at_or_after_it():
    result = run("sim.warmup_s=3", "sim.measure_s=5")
    rows = result.requests
    arrival = rows["arrival_ms"]
    assert (((arrival >= 3000.0) & (arrival < 8000.0)) == rows["measured"]).all()
    window = result.summary["window"]
    assert window["end_ms"] == 8000.0 and window["excluded_after"] == int((arrival >= 8000.0).sum()) > 0
    assert window["measured"] + window["excluded_before"] + window["excluded_after"] == len(rows)


def test_summary_figures_are_those_of_the_measured_rows():
    result = run("sim.warmup_s=3", "sim.measure_s=5")
    s, rows = result.summary, result.requests
    mine = rows[rows["measured"]]
    done = mine[mine["status"] == "completed"]
    span_s = s["window"]["span_s"]
    assert span_s == 5.0  # arrivals go on past the window's end, so the span is the whole window
    assert s["requests"]["arrived"] == len(mine) and s["requests"]["completed"] == len(done)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert s[key] == distribution(done[key].to_numpy()), key
    assert s["queue_ms"] == distribution(mine["queue_ms"].dropna().to_numpy())
    assert s["goodput"]["slo_attainment"] == rnd(mine["met_slo"].sum() / len(mine))
    assert s["goodput"]["requests_per_s"] == rnd(mine["met_slo"].sum() / span_s)
    assert s["throughput"]["requests_per_s"] == rnd(len(done) / span_s)
    assert s["throughput"]["output_tokens_per_s"] == rnd(done["output_tokens"].sum() / span_s)
    scheduled = mine[mine["queue_ms"].notna()]
    assert s["prefix_cache_hit_rate"] == rnd(scheduled["cached_tokens"].sum() / scheduled["input_tokens"].sum())
    # the window counts the steps that end inside it (distsim.metrics.window), so a step begun before its start
    # counts whole: on engines busy throughout, the figure may pass 1 by that step's share (under 1% here)
    assert 0.0 < s["gpu_utilization"] <= 1.01
    assert s["sim"]["simulated_s"] == run().summary["sim"]["simulated_s"]  # the run's own length


@pytest.mark.parametrize("keys", [[], ["policy.hedge.delay_ms=50"]], ids=["plain", "hedged"])
def test_a_window_does_not_change_the_simulation(keys):
    """Pausing the loop at the window's edges changes nothing: the same tables, the same events (hedge
    timers and cancellations included); the hedging section counts the measured requests."""
    plain = run(*keys)
    windowed = run(*keys, "sim.warmup_s=3", "sim.measure_s=5")
    pd.testing.assert_frame_equal(without_measured(windowed.requests), plain.requests)
    pd.testing.assert_frame_equal(windowed.instances, plain.instances)
    assert windowed.summary["sim"]["events"] == plain.summary["sim"]["events"]
    if keys:
        assert windowed.summary["hedging"]["requests"] == windowed.summary["window"]["measured"]


SCHEDULED = ["cluster.autoscale.kind=scheduled", "cluster.autoscale.max=4", "cluster.autoscale.schedule=[[3,4],[8,2]]"]


def run_with_window(keys: list[str], window: MeasureWindow):
    """A run with ``window`` set on the resolved scenario, past the config's checks: autoscaling refuses a
    window for now (distsim.autoscale.settings), but the windowed summary already bills its replicas."""
    scenario = resolve(load_config([*SMALL, *keys]))
    return simulate_run(dataclasses.replace(scenario, sim=dataclasses.replace(scenario.sim, window=window)))


@pytest.mark.parametrize("keys", [["cluster.instances=2"], ["cluster.instances=2", *SCHEDULED]], ids=["fixed", "autoscaled"])
def test_a_window_over_the_whole_run_gives_the_summary_without_one(keys):
    """Every request measured, the span the run's: every figure (ITL and GPU utilisation from the
    snapshots included; with autoscaling, the cost of the replicas billed) equals the plain run's."""
    plain = run(*keys)
    whole = run_with_window(keys, MeasureWindow(0, 100_000_000_000))
    assert bool(whole.requests["measured"].all())
    summary = dict(whole.summary)
    assert summary.pop("window")["excluded_before"] == 0
    assert summary_json(summary) == summary_json(plain.summary)


def test_defaults_are_byte_identical_to_not_setting_the_keys(tmp_path):
    plain = run()
    zero = run("sim.warmup_s=0", "sim.measure_s=null", "sim.drain_s=null")
    assert summary_json(zero.summary) == summary_json(plain.summary)
    assert "window" not in zero.summary and "measured" not in zero.requests
    plain.write(tmp_path / "a")
    zero.write(tmp_path / "b")
    for name in ("requests.parquet", "instances.parquet", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_fast_forwarding_gives_the_same_windowed_figures_as_stepping():
    """The window's ITL and busy time read fast-forwarded runs by their step end times and single steps
    by snapshot counts; stepping every decode step singly must give the same figures."""
    keys = ("sim.warmup_s=2.5", "sim.measure_s=4.2", "cluster.instances=2")
    fast, stepped = run(*keys), run(*keys, "sim.fast_forward=false")
    for summary in (fast.summary, stepped.summary):
        del summary["sim"]["events"]  # stepping takes more
    assert summary_json(fast.summary) == summary_json(stepped.summary)
    assert fast.summary["itl_ms"]["mean"] is not None


def test_the_drain_stops_the_run_at_its_end():
    short = ("workload=fixed", "workload.arrival.rate_rps=40")  # 128 output tokens: requests finish in the drain
    result = run(*short, "sim.warmup_s=2", "sim.measure_s=3", "sim.drain_s=1")
    rows = result.requests
    assert rows["arrival_ms"].max() <= 6000.0 < rows["completion_ms"].max() + 1000.0
    assert rows["completion_ms"].max() <= 6000.0 and (rows["status"] == "completed").any()
    assert (rows["status"] == "unfinished").any()
    unfinished = rows[rows["measured"] & (rows["status"] == "unfinished")]
    assert result.summary["requests"]["unfinished"] == len(unfinished)
    horizon = run(*short, "sim.warmup_s=2", "sim.measure_s=3", "sim.horizon_s=6")  # the same stop, said directly
    pd.testing.assert_frame_equal(result.requests, horizon.requests)
    agreeing = run(*short, "sim.warmup_s=2", "sim.measure_s=3", "sim.drain_s=1", "sim.horizon_s=6")
    assert summary_json(agreeing.summary) == summary_json(result.summary)


@pytest.mark.parametrize(
    "overrides, key, needle",
    [
        (["sim.warmup_s=-1"], "sim.warmup_s", ">= 0"),
        (["sim.warmup_s=inf"], "sim.warmup_s", "finite"),
        (["sim.measure_s=0"], "sim.measure_s", "> 0"),
        (["sim.measure_s=-5"], "sim.measure_s", "> 0"),
        (["sim.measure_s=1e-9"], "sim.measure_s", "1 microsecond"),
        (["sim.drain_s=-1", "sim.measure_s=5"], "sim.drain_s", ">= 0"),
        (["sim.drain_s=2"], "sim.drain_s", "needs sim.measure_s"),
        (["sim.measure_s=5", "sim.drain_s=2", "sim.horizon_s=6"], "sim.drain_s", "sim.horizon_s is 6 s"),
        (["sim.warmup_s=2", "sim.measure_s=5", "sim.horizon_s=6"], "sim.horizon_s", "before the measurement window ends"),
        (["sim.warmup_s=8", "sim.horizon_s=8"], "sim.horizon_s", "nothing would count"),
    ],
)
def test_bad_window_settings_name_their_key(overrides, key, needle):
    with pytest.raises(ConfigError) as err:
        run(*overrides)
    assert err.value.key == key and needle in err.value.message, str(err.value)


def test_a_bad_window_on_the_command_line_is_one_line_and_status_2(tmp_path):
    proc = run_module("distsim", "sim.drain_s=5", f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, "sim.drain_s", "needs sim.measure_s")


@pytest.mark.parametrize("layout", [["cluster=pd_disagg"], ["cluster.cells.count=2", "cluster.instances=4"]])
def test_windows_under_pd_and_cells(layout):
    """P/D and the cell layer: the same rows are measured, the simulation is unchanged, runs repeat."""
    plain = run(*layout)
    windowed = run(*layout, "sim.warmup_s=3", "sim.measure_s=5")
    rows = windowed.requests
    arrival = rows["arrival_ms"]
    assert (((arrival >= 3000.0) & (arrival < 8000.0)) == rows["measured"]).all()
    pd.testing.assert_frame_equal(without_measured(rows), plain.requests)
    again = run(*layout, "sim.warmup_s=3", "sim.measure_s=5")
    assert summary_json(again.summary) == summary_json(windowed.summary)
    assert windowed.summary["requests"]["arrived"] == int(rows["measured"].sum())


def test_windowed_jobs_on_ray_equal_the_same_run_in_process(tmp_path):
    outcome = sweep_on_local_ray([*SMALL, "sim.warmup_s=3", "sim.measure_s=5", "seed=0,1"], tmp_path)
    assert outcome.ok == 2 and outcome.failed == 0
    results = pd.read_parquet(tmp_path / "results.parquet")
    for _, row in results.iterrows():
        job = tmp_path / str(row["job"])
        alone = simulate(load_config(row["overrides"].split()))
        assert (job / "summary.json").read_text() == summary_json(alone.summary)
        assert json.loads((job / "summary.json").read_text())["window"]["span_s"] == 5.0
        assert bool(np.array_equal(pd.read_parquet(job / "requests.parquet")["measured"], alone.requests["measured"]))


def test_a_window_no_request_arrives_in_warns_and_gives_empty_figures():
    with pytest.warns(ConfigWarning, match="no request arrived in the measurement window"):
        result = run("sim.warmup_s=100")
    assert result.summary["requests"]["arrived"] == 0 and result.summary["ttft_ms"]["mean"] is None
    assert result.summary["window"]["excluded_before"] == len(result.requests)
