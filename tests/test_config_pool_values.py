"""A pool's engine and latency values (open mappings in the schema, merged onto cluster.engine and
cluster.latency) are checked as those are: one ConfigError naming the key inside the pool, exit 2."""

from __future__ import annotations

import pytest
from clikit import assert_user_error, run_module

from distsim import load_config
from distsim.errors import ConfigError
from distsim.resolve import resolve

CASES = [
    (["cluster.pools=[{name:a,count:2,engine:{async_scheduling:maybe}}]"],
     "cluster.pools[0].engine.async_scheduling", "must be true or false (got 'maybe')"),
    (["cluster.pools=[{name:a,count:2,engine:{max_num_seqs:abc}}]"],
     "cluster.pools[0].engine.max_num_seqs", "must be an integer (got 'abc')"),
    (["cluster.pools=[{name:a,count:2,engine:{max_num_seqs:null}}]"], "cluster.pools[0].engine.max_num_seqs", "may not be null"),
    (["cluster=pd_disagg", "+cluster.pools.0.engine.async_scheduling=1.5"],
     "cluster.pools[0].engine.async_scheduling", "must be true or false (got 1.5)"),
    (["cluster=pd_disagg", "+cluster.pools.1.latency.base_us=fast"],
     "cluster.pools[1].latency.base_us", "must be a number, or null (got 'fast')"),
    (["cluster=mig_mixed", "+cluster.pools.1.engine.gpu_memory_utilization=most"],
     "cluster.pools[1].engine.gpu_memory_utilization", "must be a number (got 'most')"),
    (["cluster.pools=[{name:a,count:2,engine:{bogus:1}}]"], "cluster.pools[0].engine.bogus", "unknown key; known: "
     "tensor_parallel_size, pipeline_parallel_size, data_parallel_size, enable_expert_parallel, max_model_len, max_num_seqs, max_num_batched_tokens, "
     "block_size, gpu_memory_utilization, total_kv_blocks, enable_chunked_prefill, enable_prefix_caching, "
     "scheduler_reserve_full_isl, async_scheduling, activation_reserve_fraction, scheduler, scheduler_aging_per_s, "
     "output_prediction_sigma, cpu_kv_blocks, "
     "prefill_batch_min, prefill_batch_window_ms, speculative, pipeline, storage_kv, lora"),
]


@pytest.mark.parametrize("overrides, key, rule", CASES)
def test_a_bad_pool_engine_value_is_one_config_error_naming_the_key(overrides, key, rule):
    with pytest.raises(ConfigError) as err:
        resolve(load_config(overrides))
    assert err.value.key == key
    assert err.value.message == rule


def test_the_cli_gives_one_line_and_exit_2(tmp_path):
    proc = run_module("distsim", "cluster.pools=[{name:a,count:2,engine:{async_scheduling:maybe}}]",
                      f"hydra.run.dir={tmp_path}")
    line = assert_user_error(proc, 2, "config error: cluster.pools[0].engine.async_scheduling: must be true or false (got 'maybe')")
    assert proc.stderr.strip() == line
