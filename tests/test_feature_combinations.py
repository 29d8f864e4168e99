"""The fleet and node features together: hedging, autoscaling, measurement windows, windowed prefill
batching, the CPU KV tier, MIG slices, cells, P/D and batching runtimes, in pairs and triples each
feature's own tests do not cover. Each run must finish with every arrived request recorded exactly once,
and repeat byte for byte."""

from __future__ import annotations

import pytest

from distsim import load_config, simulate
from distsim.simulate import summary_json

HEDGE = ["policy.hedge.delay_ms=5", "policy.hedge.max_copies=3", "policy.hedge.target=random"]
WINDOW = ["sim.warmup_s=2", "sim.measure_s=5", "sim.drain_s=5"]
BATCH = ["cluster.engine.prefill_batch_window_ms=10", "cluster.engine.prefill_batch_min=3"]
# 600 blocks hold 9,600 tokens: a max_model_len below that (prefix_heavy stays under 7,200) keeps vLLM's start-up check
CPU = ["cluster.engine.cpu_kv_blocks=2000", "cluster.engine.total_kv_blocks=600", "cluster.engine.max_model_len=8192"]
RUNTIME_SCALED = [
    "cluster=mixed_fleet", "workload=mixed_70_20_10", "cluster.pools.1.autoscale.kind=queue_slo",
    "cluster.pools.1.autoscale.max=3", "cluster.pools.1.autoscale.interval_s=1", "cluster.pools.1.autoscale.provision_s=1",
]  # fmt: skip

COMBINATIONS = {
    "hedging+autoscale+window": ["cluster=autoscale", "workload=mmpp_burst", *HEDGE, *WINDOW],
    "hedging+batching+cpu_tier": [*HEDGE, *BATCH, *CPU, "workload=prefix_heavy"],
    "hedging+mig+window": ["cluster=mig_mixed", "policy=weighted", *HEDGE, "sim.warmup_s=3"],
    "hedging+cells+stale_signals": ["cluster.cells.count=2", "policy=least_loaded", "signals=stale_250ms", *HEDGE],
    "pd+batching+window+horizon": ["cluster=pd_windowed", "sim.warmup_s=2", "sim.horizon_s=6"],
    "runtimes+autoscale+window+hedging": [*RUNTIME_SCALED, *WINDOW, *HEDGE],
    "runtimes+mig": ["cluster=mixed_fleet", "workload=mixed_70_20_10", "cluster.pools.0.mig.profile=3g.40gb"],
}


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_the_features_run_together_and_record_every_request_once(name):
    overrides = [*COMBINATIONS[name], "workload.num_requests=200", "seed=5"]
    result = simulate(load_config(overrides))
    requests = result.requests
    assert requests["request_id"].is_unique
    assert len(requests) > 0
    if "window" not in result.summary:
        assert result.summary["requests"]["arrived"] == len(requests)
    else:
        assert result.summary["requests"]["arrived"] == int(requests["measured"].sum())
    # every feature named took part
    sections = {"autoscale": "autoscale", "window": "window", "mig": "mig", "runtimes": "types", "hedging": "hedging"}
    for feature, section in sections.items():
        assert (feature in name.split("+")) == (section in result.summary), (feature, section)
    if "hedging" in name.split("+"):
        assert result.summary["hedging"]["copies_sent"] > 0
    again = simulate(load_config(overrides))
    assert summary_json(again.summary) == summary_json(result.summary)
