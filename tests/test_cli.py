"""The command line and the Python API: outputs, determinism, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from distsim import load_config, simulate
from distsim.simulate import summary_json

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_requests=300", "workload.arrival.rate_rps=30", "cluster.instances=2"]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distsim", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    dirs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp(name)
        proc = cli(*SMALL, f"hydra.run.dir={out}")
        assert proc.returncode == 0, proc.stderr
        dirs.append((out, proc))
    return dirs


def test_single_run_writes_the_outputs_and_prints_a_table(two_runs):
    out, proc = two_runs[0]
    for name in ("summary.json", "requests.parquet", "instances.parquet", "perf.json", ".hydra/config.yaml"):
        assert (out / name).exists(), name
    assert "ttft" in proc.stdout and "goodput" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    for key in ("requests", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "throughput", "goodput",
                "prefix_cache_hit_rate", "gpu_utilization", "jain_fairness", "cost_usd_per_1k_tokens", "fitness", "sim"):
        assert key in summary, key
    assert set(summary["ttft_ms"]) == {"mean", "min", "p50", "p75", "p90", "p95", "p99", "max"}
    assert summary["requests"]["arrived"] == 300 == summary["requests"]["completed"]
    assert "wall_s" not in json.dumps(summary)
    perf = json.loads((out / "perf.json").read_text())
    assert {"wall_s", "cpu_s", "events_per_s", "peak_rss_mb"} <= set(perf)
    req = pd.read_parquet(out / "requests.parquet")
    for col in ("request_id", "tenant", "slo_class", "arrival_ms", "status", "instance", "prefill_instance", "input_tokens",
                "output_tokens", "cached_tokens", "first_token_ms", "completion_ms", "ttft_ms", "tpot_ms", "e2e_ms",
                "queue_ms", "preemptions"):
        assert col in req.columns, col
    inst = pd.read_parquet(out / "instances.parquet")
    assert len(inst) == 2 and {"busy_ms", "steps", "peak_kv_blocks", "preemptions"} <= set(inst.columns)


def test_the_printed_fitness_names_its_kind_and_unit(two_runs):
    """Before: ``fitness       4.3712``, no name or unit."""
    _, proc = two_runs[0]
    fitness = json.loads((two_runs[0][0] / "summary.json").read_text())["fitness"]
    assert f"fitness       {fitness:,.4f}   (goodput per GPU, req/s)" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("overrides", "label"),
    [(["fitness.per=none"], "goodput, req/s"), (["fitness.per=dollar"], "goodput per dollar per hour, req/s per $/h"),
     (["fitness=capacity"], "capacity per GPU, req/s"), (["fitness=tail_latency"], "weighted score of ttft_p99_ms, tpot_p99_ms, 0 to 1")],
)  # fmt: skip
def test_every_fitness_kind_has_a_name_and_unit(overrides, label):
    from distsim.metrics.fitness import fitness_label

    assert fitness_label(load_config(overrides).fitness) == label


def test_same_config_and_seed_give_byte_identical_outputs(two_runs):
    (a, _), (b, _) = two_runs
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()
    assert (a / "instances.parquet").read_bytes() == (b / "instances.parquet").read_bytes()


def test_api_matches_the_cli(two_runs):
    out, _ = two_runs[0]
    result = simulate(load_config(SMALL))
    assert summary_json(result.summary) == (out / "summary.json").read_text()
    pd.testing.assert_frame_equal(result.requests, pd.read_parquet(out / "requests.parquet"))


def test_another_seed_gives_other_results():
    a = simulate(load_config(SMALL)).summary
    b = simulate(load_config([*SMALL, "seed=1"])).summary
    assert a["e2e_ms"] != b["e2e_ms"]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("cluster.engine.max_num_seqs=-1", "cluster.engine.max_num_seqs"),
        ("cluster.engine.gpu_memory_utilization=1.5", "cluster.engine.gpu_memory_utilization"),
        ("policy.routing.kind=nope", "known: "),
        ("cluster.model=no-such-model", "cluster.model"),
        ("cluster.hardware=TPU9", "cluster.hardware"),
        ("cluster.latency.kind=linear", "cluster.latency.base_us"),
        ("seed=-3", "seed"),
    ],
)
def test_bad_config_values_stop_with_one_line_naming_the_key(override, expected):
    with pytest.raises(Exception) as info:
        simulate(load_config([override]))
    from distsim.errors import UserError

    assert isinstance(info.value, UserError)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_model_that_does_not_fit_is_a_clear_error():
    from distsim.errors import ConfigError

    with pytest.raises(ConfigError, match="GiB"):
        simulate(load_config(["cluster.model=llama-3.1-70b", "cluster.hardware=L40S"]))


@pytest.mark.parametrize("override", ["cluster.engine.max_num_seqs=-1", "cluster.nokey=1", "cluster.instances=abc", "policy=nope"])
def test_cli_bad_input_exits_nonzero_without_traceback(override, tmp_path):
    proc = cli(override, f"hydra.run.dir={tmp_path}")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip(), "an error message is printed"


# --- type errors and unknown keys: one line naming the key, exit 2 -------------------------------

TYPE_ERRORS = [
    ("cluster.engine.prefill_batch_window_ms=abc", "cluster.engine.prefill_batch_window_ms", "must be a number"),
    ("sim.progress=maybe", "sim.progress", "must be true or false, or null"),
    ("cluster.instances=1.5", "cluster.instances", "must be an integer (got 1.5)"),
    ("workload.arrival.rates_rps=[a,b]", "workload.arrival.rates_rps[0]", "must be a number"),
    ("cluster.model=[1]", "cluster.model", "must be a string"),
    ("seed=null", "seed", "may not be null"),
]
UNKNOWN = [
    ("cluster.nokey=1", "cluster.nokey", "unknown key; known: model, hardware, instances"),
    ("policy=nope", "policy", "no config 'nope' in group policy; known: always_busiest, cost_escalation"),
]


@pytest.mark.parametrize("override, key, rule", TYPE_ERRORS + UNKNOWN)
def test_a_type_error_or_unknown_key_is_one_line_naming_the_key_and_the_rule(override, key, rule, tmp_path):
    from clikit import assert_user_error

    from distsim.errors import ConfigError

    proc = cli(override, f"hydra.run.dir={tmp_path}")
    line = assert_user_error(proc, 2, f"config error: {key}: ", rule)
    assert proc.stderr.strip() == line, proc.stderr  # one line, nothing of Hydra's around it
    with pytest.raises(ConfigError) as err:  # the Python API says the same
        load_config([override])
    assert err.value.key == key and f"distsim: {err.value}" == line


def test_a_type_error_in_a_sweep_or_a_search_is_the_same_one_line(tmp_path):
    from clikit import assert_user_error, run_module

    runner = ["runner.num_workers=1", "runner.progress=false"]
    proc = cli("-m", "seed=0,1", "sim.progress=maybe", *runner, f"hydra.sweep.dir={tmp_path / 'a'}")
    assert_user_error(proc, 2, "config error: sim.progress: must be true or false")
    proc = cli("-m", "cluster.instances=2,x", *runner, f"hydra.sweep.dir={tmp_path / 'b'}")
    assert_user_error(proc, 2, "config error: cluster.instances: must be an integer (got 'x')")
    assert "Ray workers" not in proc.stderr
    proc = run_module("distsim.search", "search.population=many", f"hydra.run.dir={tmp_path / 'c'}")
    assert_user_error(proc, 2, "config error: search.population: must be an integer (got 'many')")
