"""A timeline window that starts at or after the run's end: an error before the run where the config knows
the end (sim.horizon_s), a warning after it where it does not (the run is valid, timeline.json empty)."""

from __future__ import annotations

import json

import pytest
from clikit import run_module

from distsim import load_config, simulate
from distsim.errors import ConfigError, ConfigWarning

SMALL = ["workload.num_requests=50", "sim.timeline=true"]


def test_without_a_horizon_a_window_after_the_end_warns_naming_the_key_and_the_end():
    with pytest.warns(ConfigWarning, match=r"sim.timeline_start_s: is 100000 s, at or after the end of the run \([0-9.]+ s\)"):
        result = simulate(load_config([*SMALL, "sim.timeline_start_s=100000"]))
    assert result.summary["requests"]["completed"] == 50
    assert not [e for e in result.timeline_trace["traceEvents"] if e.get("ph") not in ("M",)]


def test_with_a_horizon_the_same_window_is_an_error_before_the_run():
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*SMALL, "sim.timeline_start_s=100000", "sim.horizon_s=20"]))
    assert err.value.key == "sim.timeline_start_s" and "end of the run (20 s)" in err.value.message


def test_a_window_inside_the_run_is_silent():
    result = simulate(load_config([*SMALL, "sim.timeline_start_s=0.5"]))  # pytest makes a ConfigWarning fail
    assert [e for e in result.timeline_trace["traceEvents"] if e.get("ph") == "X"]


def test_the_cli_says_it_on_stderr_and_writes_the_empty_timeline(tmp_path):
    proc = run_module("distsim", *SMALL, "sim.timeline_start_s=100000", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert "distsim: warning: sim.timeline_start_s: is 100000 s, at or after the end of the run" in proc.stderr
    assert json.loads((tmp_path / "timeline.json").read_text())["traceEvents"] is not None
