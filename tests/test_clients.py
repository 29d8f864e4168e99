"""Closed-loop clients (workload.clients): Little's law, one request out per client, stages and ramps, a
trace replayed closed-loop, the mixed mode's rate limit, determinism, bad values, and a measured
``--max-concurrency`` run replayed closed-loop through validate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError, InputFileError
from distsim.fidelity.bench_format import read_bench_run
from distsim.fidelity.replay import simulated_frame
from distsim.fidelity.validation import validate
from distsim.simulate import summary_json

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/fixtures/traces/azure_conv_head300.csv"
BENCH = Path("/work/shared/data/llmservingsim_bench/RTX4090_Llama-3.1-8B")
SMALL = ["workload=fixed", "cluster.instances=1", "workload.input_tokens.value=256",
         "workload.output_tokens.dist=uniform", "workload.output_tokens.low=16", "workload.output_tokens.high=96"]


def run(*overrides: str):
    return simulate(load_config([*SMALL, *overrides]))


def replies_ms(df) -> np.ndarray:
    return df["completion_ms"].to_numpy()  # no front end: the client reads its reply as the last token leaves


def test_littles_law_holds_within_one_percent():
    """N = X (R + Z): throughput times (response time + think time) is the number of clients."""
    n = 6
    df = run(f"workload.clients.count={n}", "workload.num_requests=3000",
             "workload.clients.think_time_s.dist=exponential", "workload.clients.think_time_s.mean=0.4").requests
    assert (df["status"] == "completed").all()
    span_s = (replies_ms(df).max() - df["arrival_ms"].min()) / 1000.0
    throughput = len(df) / span_s
    r_s = df["e2e_ms"].mean() / 1000.0
    think = []
    for _, g in df.sort_values("arrival_ms").groupby("client"):
        think.extend((g["arrival_ms"].to_numpy()[1:] - replies_ms(g)[:-1]) / 1000.0)
    z_s = float(np.mean(think))
    assert z_s == pytest.approx(0.4, rel=0.1)  # the think times drawn are the configured ones
    assert throughput * (r_s + z_s) == pytest.approx(n, rel=0.01)


def test_a_client_never_has_two_requests_out():
    df = run("workload.clients.count=5", "workload.num_requests=400").requests
    assert sorted(df["client"].unique()) == [0, 1, 2, 3, 4]
    for _, g in df.sort_values("request_id").groupby("client"):
        assert (g["arrival_ms"].to_numpy()[1:] >= replies_ms(g)[:-1]).all()
    # ids are in send order: arrivals never go backwards
    assert (np.diff(df.sort_values("request_id")["arrival_ms"].to_numpy()) >= 0).all()


def in_flight_at(df, t_ms: float) -> int:
    return int(((df["arrival_ms"] <= t_ms) & (replies_ms(df) > t_ms)).sum())


def test_stages_hold_their_concurrency_and_the_ramp_spreads_starts():
    r = run("workload.num_requests=null", "workload.clients.ramp_s=2",
            "workload.clients.stages=[{clients: 2, duration_s: 20}, {clients: 6, duration_s: 20}, {clients: 1, duration_s: 20}]")
    df, stages = r.requests, r.summary["clients"]["stages"]
    assert [s["clients"] for s in stages] == [2, 6, 1]
    assert df["arrival_ms"].max() < 60_000  # nothing sent after the last stage
    starts = df.groupby("client")["arrival_ms"].min().sort_index().to_numpy()
    assert starts[:2].tolist() == [0.0, 1000.0]  # 2 clients over 2 s
    assert starts[2:].tolist() == [20_000.0, 20_500.0, 21_000.0, 21_500.0]  # 4 more over the next 2 s
    for t in np.arange(0.0, 60_000.0, 250.0):
        cap = 2 if t < 20_000 else 6 if t < 40_000 else 6  # retiring clients finish what they sent
        assert in_flight_at(df, t) <= cap
    assert in_flight_at(df, 45_000.0) <= 1  # by then the third stage's single client is alone
    assert stages[1]["in_flight_mean"] == pytest.approx(6 - 0.5 * 4 * 2 / 20, rel=0.05)  # less the ramp's gap


def test_a_trace_replayed_closed_loop_keeps_its_order_and_lengths():
    trace = ["workload.kind=trace", "workload.format=azure", f"workload.path={TRACE}", "workload.num_requests=null"]
    open_loop = simulate(load_config(["cluster.instances=1", *trace])).requests.sort_values("request_id")
    closed = simulate(load_config(["cluster.instances=1", *trace, "workload.clients.count=4"])).requests
    closed = closed.sort_values("request_id")
    assert len(closed) == len(open_loop) == 300
    for col in ("input_tokens", "output_tokens"):
        assert closed[col].tolist() == open_loop[col].tolist()
    assert closed.groupby("client").size().sum() == 300


def test_mixed_mode_never_sends_before_the_arrival_process():
    arrivals = run("workload.num_requests=300", "workload.arrival.rate_rps=20").requests.sort_values("request_id")
    mixed = run("workload.num_requests=300", "workload.arrival.rate_rps=20", "workload.clients.count=3",
                "workload.clients.mode=mixed").requests.sort_values("request_id")
    gap = mixed["arrival_ms"].to_numpy() - arrivals["arrival_ms"].to_numpy()
    assert (gap >= 0).all() and gap.max() > 0  # three clients cannot keep up with 20 req/s: sends wait
    roomy = run("workload.num_requests=300", "workload.arrival.rate_rps=2", "workload.clients.count=64",
                "workload.clients.mode=mixed").requests.sort_values("request_id")
    slow = run("workload.num_requests=300", "workload.arrival.rate_rps=2").requests.sort_values("request_id")
    assert roomy["arrival_ms"].tolist() == slow["arrival_ms"].tolist()  # never short of a client: open loop


def test_same_seed_same_bytes():
    args = ("workload.clients.count=7", "workload.num_requests=300", "workload.clients.think_time_s.dist=exponential",
            "workload.clients.think_time_s.mean=0.2", "cluster.instances=2", "policy=least_loaded")
    a, b = run(*args), run(*args)
    assert summary_json(a.summary) == summary_json(b.summary)
    assert a.requests.equals(b.requests)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("workload.clients.count=0", "workload.clients.count"),
        ("workload.clients.mode=open", "workload.clients.mode"),
        ("workload.clients.ramp_s=-1", "workload.clients.ramp_s"),
        ("workload.clients.stages=[{clients: 2, duration_s: -5}]", "workload.clients.stages[0].duration_s"),
        ("workload.clients.stages=[{clients: 0, duration_s: 5}]", "workload.clients.stages"),
        ("workload.sessions.enabled=true", "workload.clients"),
    ],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        run("workload.clients.count=2" if "stages" not in override else "workload.clients.count=null", override)
    assert err.value.key == key
    assert "\n" not in str(err.value)


def test_count_and_stages_together_are_refused():
    with pytest.raises(ConfigError, match="either count or stages"):
        run("workload.clients.count=2", "workload.clients.stages=[{clients: 2, duration_s: 5}]")


def bench_copy(tmp_path: Path, **meta) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(BENCH, folder)
    data = json.loads((folder / "meta.json").read_text())
    data.update(meta)
    (folder / "meta.json").write_text(json.dumps(data))
    return folder


@pytest.mark.skipif(not BENCH.is_dir(), reason="the shared data folder is not mounted")
def test_a_max_concurrency_run_replays_closed_loop(tmp_path):
    folder = bench_copy(tmp_path, max_concurrency=8, request_rate="inf")
    run_ = read_bench_run(folder)
    assert run_.load_mode == "closed" and run_.max_concurrency == 8
    v = validate(run_, ["workload.num_requests=null"])
    df = v.result.requests.sort_values("request_id")
    assert df["input_tokens"].tolist() == run_.requests["input_tokens"].tolist()  # its order and lengths
    assert max(in_flight_at(df, t) for t in df["arrival_ms"]) == 8
    assert v.result.summary["clients"]["clients"] == 8
    frame = simulated_frame(run_, v.config)  # what calibration fits: the same closed-loop replay
    assert len(frame) == 300 and np.allclose(np.sort(frame["arrival_s"] * 1000.0), np.sort(df["arrival_ms"]))
    assert read_bench_run(bench_copy(tmp_path / "b", max_concurrency=4, request_rate=5)).load_mode == "mixed"
    assert read_bench_run(BENCH).load_mode == "open"


@pytest.mark.skipif(not BENCH.is_dir(), reason="the shared data folder is not mounted")
def test_a_bad_max_concurrency_names_the_file(tmp_path):
    with pytest.raises(InputFileError, match="meta.json.*max_concurrency"):
        read_bench_run(bench_copy(tmp_path, max_concurrency=0))


@pytest.mark.parametrize(
    "world",
    [
        ["cluster.instances=4", "cluster.cells.count=2", "cluster.cells.rtt.spread_ms=20"],  # replies cross the network
        ["cluster.instances=3", "policy.hedge.delay_ms=1"],  # copies settle on the original
    ],
    ids=["cells", "hedging"],
)
def test_clients_drive_every_world(world):
    r = simulate(load_config([*SMALL, *world, "workload.clients.count=6", "workload.num_requests=300"]))
    df = r.requests
    if "hedging" in r.summary:
        assert r.summary["hedging"]["copies_sent"] > 0
    assert len(df) == 300 and (df["status"] == "completed").all()
    for _, g in df.sort_values("request_id").groupby("client"):
        assert (g["arrival_ms"].to_numpy()[1:] >= replies_ms(g)[:-1]).all()


def test_what_needs_a_fixed_stream_of_arrivals_is_refused():
    with pytest.raises(ConfigError) as err:
        run("workload.clients.count=2", "fitness.kind=capacity")
    assert err.value.key == "fitness.kind" and "workload.clients" in str(err.value)
    from distsim.regret.run import check_supported
    from distsim.resolve import resolve

    with pytest.raises(ConfigError, match="regret.samples: .*closed-loop clients"):
        check_supported(resolve(load_config([*SMALL, "workload.clients.count=2"])))
