"""scripts/fidelity_load_slope.py's emulation of vLLM's async scheduling (issue 24, item 4): a request that
reaches a busy engine waits one step more, an idle engine takes it at once, and the patch comes off."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from distsim.fidelity.suite.data import read_suite
from distsim.fidelity.suite.replay import suite_config
from distsim.instance.instance import Instance
from distsim.simulate import simulate

ROOT = Path(__file__).parents[1]
RUNS = ROOT.parent / "shared" / "data" / "h100_vllm_runs"


def _script():
    spec = importlib.util.spec_from_file_location("fidelity_load_slope", ROOT / "scripts" / "fidelity_load_slope.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not RUNS.is_dir(), reason=f"{RUNS} is absent")
def test_async_scheduling_emulation_adds_a_step_and_comes_off():
    script = _script()
    run = next(r for r in read_suite(RUNS).runs if r.id == "63")
    cfg = lambda: suite_config(run, [*script.POOL_ASYNC, "workload.num_requests=200"])  # noqa: E731
    before = {name: getattr(Instance, name) for name in ("_enqueue", "_plan_step", "_plan_next", "_admit_waiting")}
    sync = simulate(cfg()).requests
    undo = script.async_scheduling()
    try:
        emulated = simulate(cfg()).requests
    finally:
        undo()
    assert {name: getattr(Instance, name) for name in before} == before
    # the same requests and tokens; the first token later by about one decode step (Nemo TP 1: 9-11 ms)
    assert (emulated["output_tokens"] == sync["output_tokens"]).all()
    lag = (emulated["ttft_ms"] - sync["ttft_ms"]).mean()
    assert 5.0 < lag < 15.0
    # the first request finds the engine idle: no lag
    assert emulated["ttft_ms"].iloc[0] == pytest.approx(sync["ttft_ms"].iloc[0])
