"""Reports say what happened: python -m distsim.report on a sweep that did not run as planned names the
interruption, the jobs and configurations that never ran, and the jobs retried after their worker died;
the terminal summary's figures are summary.json's, in its units."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from raykit import sweep_on_local_ray

from distsim.report import main as report_main
from distsim.runner import sweep as sweep_module
from distsim.runner.sweep import SweepInterrupted

SMALL = ["workload.num_requests=200", "cluster.instances=2"]
POLICIES = ["policy=round_robin,random,least_loaded", "seed=0,1"]


@pytest.fixture(scope="module")
def interrupted_sweep(tmp_path_factory):
    """Six jobs (three policies x two seeds): job 0's worker dies once and is retried, then Ctrl-C
    arrives after the first two jobs, so two of the three configurations never run."""
    out = tmp_path_factory.mktemp("interrupted") / "sweep"
    mark = out.parent / "killed"
    run_todo = sweep_module._run_todo

    def stopped_after_two(plan, todo, *args):
        run_todo(plan, todo[:2], *args)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DISTSIM_FAULT_EXIT", f"0:{mark}")
        mp.setattr(sweep_module, "_run_todo", stopped_after_two)
        with pytest.raises(SweepInterrupted):
            sweep_on_local_ray([*SMALL, *POLICIES], out, workers=1)
    assert mark.exists()  # the fault fired: job 0 ran twice
    return out


def test_sweep_json_records_what_never_ran_and_what_was_retried(interrupted_sweep):
    meta = json.loads((interrupted_sweep / "sweep.json").read_text())
    assert meta["interrupted"] is True and meta["jobs"] == 6 and meta["configs"] == 3
    assert meta["jobs_not_run"] == [2, 3, 4, 5]
    assert meta["configs_not_run"] == [f"{' '.join(SMALL)} policy=random", f"{' '.join(SMALL)} policy=least_loaded"]
    assert meta["retried"] == {"0": 2}


def test_the_report_names_the_interruption_the_missing_jobs_and_the_retry(interrupted_sweep, capsys):
    assert report_main([str(interrupted_sweep)]) == 0
    assert "interrupted: 2 of 6 jobs ran" in capsys.readouterr().err
    text = (interrupted_sweep / "report" / "report.md").read_text()
    assert "2 of 6 planned jobs ran (2 ok, 0 failed); 1 of 3 configurations." in text
    assert "**The sweep was interrupted:** 4 jobs never ran (jobs 2, 3, 4, 5)" in text
    assert "2 of 3 configurations have no job: `" in text and "policy=random`" in text and "policy=least_loaded`" in text
    assert "**Retried** after their worker died or hung: job 0 (2 attempts)." in text


def test_a_complete_sweep_says_nothing_of_interruptions(tmp_path):
    out = tmp_path / "sweep"
    sweep_on_local_ray([*SMALL, "seed=0,1"], out, workers=1)
    meta = json.loads((out / "sweep.json").read_text())
    assert (meta["interrupted"], meta["jobs_not_run"], meta["configs_not_run"], meta["retried"]) == (False, [], [], {})
    assert report_main([str(out)]) == 0
    text = (out / "report" / "report.md").read_text()
    assert "2 jobs, 2 ok, 0 failed, 1 configuration." in text
    assert "interrupted" not in text and "Retried" not in text


def test_the_terminal_prints_cost_in_summary_jsons_unit():
    from distsim import load_config, simulate
    from distsim.report_table import format_summary

    summary = simulate(load_config(SMALL)).summary
    line = next(ln for ln in format_summary(summary).splitlines() if ln.startswith("cost"))
    assert f"${summary['cost_usd_per_1k_tokens']:.8f} per 1k tokens" in line


def test_latency_cdfs_never_pool_configurations_that_differ():
    """Two policies at two loads are four curves, not two (the old report pooled each policy's loads)."""
    from distsim.report import MAX_CDF_LINES, cdf_groups

    configs = [f"policy={p} workload.arrival.rate_rps={r}" for p in ("a", "b") for r in (10, 20)]
    results = pd.DataFrame({
        "job": range(8), "config": [c for c in configs for _ in range(2)], "status": "ok",
        "policy": [c.split()[0][7:] for c in configs for _ in range(2)],
    })
    ranking = pd.DataFrame({"config": configs, "label": configs, "rank": [2, 1, 4, 3]})
    keys, left_out = cdf_groups(results, ranking)
    assert left_out == 0 and keys.nunique() == 4
    assert [k.split(" ", 1)[1] for k in sorted(keys.unique())] == [configs[1], configs[0], configs[3], configs[2]]
    many = pd.DataFrame({"job": range(12), "config": [f"c{i}" for i in range(12)], "status": "ok", "policy": "p"})
    keys, left_out = cdf_groups(many, pd.DataFrame({"config": many["config"], "label": many["config"], "rank": range(12)}))
    assert keys.nunique() == MAX_CDF_LINES and left_out == 12 - MAX_CDF_LINES


def test_a_latency_band_never_dips_below_zero():
    from distsim.report import band

    group = pd.DataFrame({"x": [1, 1, 2, 2], "ttft_ms.p99": [10.0, 400.0, 300.0, 310.0]})
    xs, means, lows, highs = band(group, "x", "ttft_ms.p99", 0.0)
    assert xs == [1, 2] and lows[0] == 0.0 and highs[0] > means[0] == 205.0
    assert 0 < lows[1] < means[1] < highs[1]
    _, _, unclipped, _ = band(group, "x", "ttft_ms.p99", -math.inf)
    assert unclipped[0] < 0  # the t-interval itself reaches below zero
