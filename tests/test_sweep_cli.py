"""`python -m distsim -m ...`: the Hydra sweeper plugin end to end, in a fresh process with its own Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distsim", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_the_multirun_ranks_policies_with_confidence_intervals(tmp_path):
    proc = cli(
        "-m", "policy=round_robin,random", "seed=range(3)", "workload.num_requests=200", "cluster.instances=2",
        f"hydra.sweep.dir={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = pd.read_parquet(tmp_path / "results.parquet")
    assert len(results) == 6 and (results["status"] == "ok").all()
    assert sorted(results["seed"]) == [0, 0, 1, 1, 2, 2]
    for col in (
        "job",
        "overrides",
        "config",
        "policy",
        "seed",
        "status",
        "error",
        "fitness",
        "ttft_ms.p99",
        "throughput.output_tokens_per_s",
    ):
        assert col in results.columns, col
    ranking = pd.read_csv(tmp_path / "ranking.csv")
    assert len(ranking) == 2 and set(ranking["policy"]) == {"round_robin", "random"}
    assert (ranking["fitness_ci_low"] <= ranking["fitness_mean"]).all() and (
        ranking["fitness_mean"] <= ranking["fitness_ci_high"]
    ).all()
    assert ranking["tied_with_best"].iloc[0] and ranking["rank"].iloc[0] == 1
    table = proc.stdout
    assert "policy=round_robin" in table and "policy=random" in table and "95% CI" in table
    assert "6 of 6 jobs ok" in table
    assert (tmp_path / "0" / "summary.json").exists() and (
        tmp_path / "0" / ".hydra" / "overrides.yaml"
    ).exists()
    assert "Traceback" not in proc.stderr


def test_a_bad_sweep_value_is_one_line_before_any_job_runs(tmp_path):
    proc = cli(
        "-m", "policy=round_robin,no_such_policy", "seed=0,1", f"hydra.sweep.dir={tmp_path}", timeout=600
    )
    assert proc.returncode == 2
    assert "no_such_policy" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results.parquet").exists()
