"""The fidelity guard: the shipped defaults, scored on the step tables of
../shared/data/h100_steps and on a fixed slice of ../shared/data/h100_vllm_runs, may not be more than
one point worse than the figures docs/fidelity.md records (docs/data/fidelity_guard.json, written by
scripts/fidelity_h100.py with the doc). Fidelity moves only on purpose: rerun the script and commit
the doc and the record with the change. About 10 s; skipped where ../shared is not beside the repo."""

from __future__ import annotations

import json

import pytest

from distsim.fidelity import guard

needs_data = pytest.mark.skipif(
    not (guard.SHARED / "h100_steps").is_dir() or not (guard.SHARED / "h100_vllm_runs").is_dir(),
    reason=f"{guard.SHARED} is absent",
)


def test_the_record_exists_and_covers_steps_and_runs():
    recorded = json.loads(guard.RECORD.read_text(encoding="utf-8"))
    assert recorded["steps"] and recorded["runs_median"]
    assert recorded["run_slice"] == list(guard.RUN_SLICE) == list(recorded["runs"])
    assert recorded["tolerance_points"] == guard.TOLERANCE


def test_violations_name_a_figure_that_rose():
    rec = {"steps": {"a": 5.0}, "runs": {"1": {"e2e_mean": 3.0}}, "runs_median": {"e2e_mean": 3.0}}
    same = json.loads(json.dumps(rec))
    assert guard.violations(rec, same) == []
    same["steps"]["a"] = 5.9  # within a point
    assert guard.violations(rec, same) == []
    same["steps"]["a"] = 6.2
    same["runs"]["1"]["e2e_mean"] = 1.0  # better is fine
    assert guard.violations(rec, same) == ["steps/a: 6.20% now, 5.00% recorded (+1.20 points)"]
    del same["steps"]["a"]
    assert guard.violations(rec, same) == ["steps/a: recorded 5.00%, now missing"]


@needs_data
def test_shipped_defaults_are_no_worse_than_recorded():
    recorded = json.loads(guard.RECORD.read_text(encoding="utf-8"))
    bad = guard.violations(recorded, guard.figures())
    assert not bad, "fidelity fell against docs/data/fidelity_guard.json:\n" + "\n".join(bad)
