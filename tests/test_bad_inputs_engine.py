"""Limits a real engine has, config contradictions and counts that say what they count.

Each mistake stops before the first event with one line naming the key (exit 2 on the command line);
a legal but suspicious config runs with one warning line.
"""

from __future__ import annotations

import json
import warnings

import pytest
from clikit import assert_user_error, run_module

from distsim import load_config, simulate
from distsim.cluster import footprint
from distsim.errors import ConfigError, ConfigWarning

TINY = ["workload.num_requests=40", "cluster.instances=2"]


def _config_error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*TINY, *overrides]))
    return str(err.value)


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["cluster.engine.tensor_parallel_size=16"], "cluster.engine.tensor_parallel_size", "one H100 node (8 GPUs"),
        (["cluster.model=llama-3.1-70b", "cluster.engine.tensor_parallel_size=64"], "cluster.engine.tensor_parallel_size", "64 GPUs"),
        (["cluster.gpus_per_node=0"], "cluster.gpus_per_node", ">= 1"),
        (["cluster.engine.block_size=1000000"], "cluster.engine.block_size", "1, 8, 16, 32, 64, 128, 256"),
        (["cluster.engine.block_size=4"], "cluster.engine.block_size", "as vLLM allows"),
        (["sim.horizon_s=inf"], "sim.horizon_s", "finite"),
        (["sim.horizon_s=nan"], "sim.horizon_s", "finite"),
    ],
)
def test_an_engine_limit_is_a_config_error_naming_the_key(overrides, key, words):
    message = _config_error(overrides)
    assert key in message and words in message, message


def test_tensor_parallelism_beyond_eight_gpus_runs_when_the_nodes_are_declared_larger():
    cfg = load_config([*TINY, "cluster.model=llama-3.1-70b", "cluster.engine.tensor_parallel_size=16", "cluster.gpus_per_node=72"])
    assert simulate(cfg).summary["requests"]["completed"] == 40


def test_a_fleet_beyond_the_memory_available_is_refused_at_once(monkeypatch):
    monkeypatch.setattr(footprint, "available_memory_bytes", lambda: 2_000_000_000)
    message = _config_error(["cluster.instances=1000000"])
    assert "cluster.instances" in message and "1,000,000 instances" in message and "2.0 GB" in message


def test_prefix_aware_routing_with_prefix_caching_off_warns_once_and_runs():
    cfg = load_config([*TINY, "policy=prefix_affinity", "cluster.engine.enable_prefix_caching=false"])
    with pytest.warns(ConfigWarning, match="policy.routing.kind: prefix_affinity routes on prefix-cache hits"):
        result = simulate(cfg)
    assert result.summary["requests"]["completed"] == 40
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # with caching on, or a policy without prefixes: silent
        simulate(load_config([*TINY, "policy=prefix_affinity"]))
        simulate(load_config([*TINY, "cluster.engine.enable_prefix_caching=false"]))


def test_the_summary_counts_preempted_requests_and_preemption_events_apart():
    overrides = ["workload=poisson_chat", "cluster.instances=1", "cluster.engine.total_kv_blocks=300",
                 "workload.num_requests=300", "workload.arrival.rate_rps=50", "cluster.engine.scheduler_reserve_full_isl=false"]
    result = simulate(load_config(overrides))
    counts = result.summary["requests"]
    assert counts["preemptions"] == int(result.requests["preemptions"].sum()) == int(result.instances["preemptions"].sum())
    assert counts["preempted"] == int((result.requests["preemptions"] > 0).sum())
    assert 0 < counts["preempted"] < counts["preemptions"]


def test_the_command_line_prints_one_line_for_an_engine_limit(tmp_path):
    proc = run_module("distsim", "cluster.engine.tensor_parallel_size=16", f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, "cluster.engine.tensor_parallel_size", "H100")
    proc = run_module("distsim", *TINY, "policy=prefix_affinity", "cluster.engine.enable_prefix_caching=false",
                      f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0 and "distsim: warning: policy.routing.kind:" in proc.stderr
    assert "Traceback" not in proc.stderr and "warnings.warn" not in proc.stderr


def _mooncake(tmp_path, lengths: list[int]) -> str:
    path = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 10 * i, "input_length": n, "output_length": 50, "hash_ids": list(range(i * 1000, i * 1000 + -(-n // 512)))}
            for i, n in enumerate(lengths)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_prompt_beyond_the_context_length_is_rejected_as_vllm_does(tmp_path):
    trace = _mooncake(tmp_path, [1000, 200_000, 2000])
    cfg = load_config(["workload.kind=trace", "workload.format=mooncake", f"workload.path={trace}"])
    with pytest.warns(ConfigWarning, match=r"cluster.engine.max_model_len: 1 of 3 requests .* \(131072 tokens\)"):
        result = simulate(cfg)
    status = result.requests.set_index("input_tokens")["status"]
    assert status[200_000] == "rejected" and status[1000] == status[2000] == "completed"
    counts = result.summary["requests"]
    assert counts["too_long"] == 1 and counts["rejected"] == 1 and counts["admitted"] == 2


def test_max_model_len_is_the_limit_and_may_not_exceed_the_models_context(tmp_path):
    trace = _mooncake(tmp_path, [1000, 3000])
    cfg = load_config(["workload.kind=trace", "workload.format=mooncake", f"workload.path={trace}",
                       "cluster.engine.max_model_len=2048"])
    with pytest.warns(ConfigWarning):
        assert simulate(cfg).summary["requests"]["too_long"] == 1
    assert "context length (131072 tokens" in _config_error(["cluster.engine.max_model_len=200000"])


def test_a_shared_prefix_beyond_the_context_length_rejects_every_request_that_uses_it():
    overrides = [*TINY, "workload=prefix_heavy", "workload.num_requests=40", "workload.prefix.tokens=200000"]
    with pytest.warns(ConfigWarning, match="max_model_len"):
        result = simulate(load_config(overrides))
    with_prefix = result.requests["input_tokens"] > 131072
    assert with_prefix.any() and (result.requests.loc[with_prefix, "status"] == "rejected").all()
    assert result.summary["requests"]["too_long"] == int(with_prefix.sum())


def test_chunked_prefill_off_needs_a_budget_that_holds_the_longest_prompt():
    message = _config_error(["cluster.engine.enable_chunked_prefill=false"])
    assert "cluster.engine.max_num_batched_tokens" in message and "max_model_len (131072)" in message
    short = ["workload.prefix.share=0", "workload.input_tokens.max=1000", "workload.output_tokens.max=1000"]
    cfg = load_config([*TINY, *short, "cluster.engine.enable_chunked_prefill=false", "cluster.engine.max_model_len=2048"])
    assert simulate(cfg).summary["requests"]["completed"] == 40


def test_a_kv_cache_smaller_than_one_sequence_warns_and_dropped_requests_are_explained():
    cfg = load_config([*TINY, "cluster.engine.total_kv_blocks=20", "workload=poisson_chat"])
    with pytest.warns(ConfigWarning) as record:
        result = simulate(cfg)
    messages = [str(w.message) for w in record]
    assert any("vLLM would refuse to start" in m for m in messages)
    dropped = result.summary["requests"]["dropped"]
    assert dropped > 0 and any(f"{dropped} of 40 requests were dropped" in m for m in messages)
