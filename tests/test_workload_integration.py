"""Workloads through the simulator: real prefix reuse reaches the caches, and the request stream
does not depend on what is simulated (common random numbers across policies and clusters)."""

from __future__ import annotations

import pandas as pd

from distsim import load_config, simulate
from distsim.workload import build_workload
from distsim.workload.traces.reuse import block_reuse

MOONCAKE = ["workload=mooncake_conversation", "workload.max_rows=1500"]


def test_mooncake_hit_rate_is_close_to_and_never_above_the_traces_reuse_bound():
    # one instance with a cache larger than the whole slice, arrivals slowed down so every prefill
    # has finished before a later request could reuse it
    cfg = load_config([*MOONCAKE, "cluster.instances=1", "cluster.engine.total_kv_blocks=3000000", "workload.time_scale=20"])
    bound = block_reuse(build_workload(cfg.workload, seed=0, block_size=16), 16).fraction
    hit = simulate(cfg).summary["prefix_cache_hit_rate"]
    assert hit <= bound + 1e-9
    assert hit >= 0.97 * bound, (hit, bound)


def test_the_request_stream_is_the_same_whatever_policy_or_cluster():
    cols = ["request_id", "arrival_ms", "input_tokens", "output_tokens", "tenant", "slo_class", "session_id"]
    base = ["workload=multi_tenant", "workload.num_requests=400"]
    runs = [
        simulate(load_config([*base, "policy=round_robin"])).requests[cols],
        simulate(load_config([*base, "policy=weighted", "cluster.instances=7"])).requests[cols],
        simulate(load_config([*base, "policy=power_of_two", "cluster=pd_disagg", "signals=stale_250ms"])).requests[cols],
    ]
    for other in runs[1:]:
        pd.testing.assert_frame_equal(runs[0], other)
