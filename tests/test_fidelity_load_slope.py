"""scripts/fidelity_load_slope.py's "pool + async" replay (issue 24, item 4) sets the engine's real key,
``cluster.engine.async_scheduling=true`` (distsim/instance/scheduler.py): a request that reaches a busy
engine waits one step more, an idle engine takes it at once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from distsim.fidelity.suite.data import read_suite
from distsim.fidelity.suite.replay import suite_config
from distsim.simulate import simulate

ROOT = Path(__file__).parents[1]
RUNS = ROOT.parent / "shared" / "data" / "h100_vllm_runs"


def _script():
    spec = importlib.util.spec_from_file_location("fidelity_load_slope", ROOT / "scripts" / "fidelity_load_slope.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not RUNS.is_dir(), reason=f"{RUNS} is absent")
def test_the_pool_async_replay_adds_a_step():
    script = _script()
    assert "cluster.engine.async_scheduling=true" in script.POOL_ASYNC
    run = next(r for r in read_suite(RUNS).runs if r.id == "63")
    sync_over = [o for o in script.POOL_ASYNC if "async_scheduling" not in o] + ["cluster.engine.async_scheduling=false"]
    sync = simulate(suite_config(run, [*sync_over, "workload.num_requests=200"])).requests
    on = simulate(suite_config(run, [*script.POOL_ASYNC, "workload.num_requests=200"])).requests
    # the same requests and tokens; the first token later by about one decode step (Nemo TP 1: 9-11 ms)
    assert (on["output_tokens"] == sync["output_tokens"]).all()
    lag = (on["ttft_ms"] - sync["ttft_ms"]).mean()
    assert 5.0 < lag < 15.0
    # the first request finds the engine idle: no lag, but for the host time (tens of us) that the
    # synchronous engine adds to its step and the asynchronous one hides
    assert on["ttft_ms"].iloc[0] == pytest.approx(sync["ttft_ms"].iloc[0], abs=0.1)
