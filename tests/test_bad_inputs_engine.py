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
    with pytest.warns(ConfigWarning, match="cluster.engine.max_model_len: .* vLLM would refuse to start"):
        result = simulate(load_config(overrides))  # 300 blocks: the explicit cache is far below the context length
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
    cfg = load_config(["workload=mooncake_conversation", "workload.kind=trace", "workload.format=mooncake", f"workload.path={trace}"])
    with pytest.warns(ConfigWarning, match=r"cluster.engine.max_model_len: 1 of 3 requests .* \(131072 tokens\)"):
        result = simulate(cfg)
    status = result.requests.set_index("input_tokens")["status"]
    assert status[200_000] == "rejected" and status[1000] == status[2000] == "completed"
    counts = result.summary["requests"]
    assert counts["too_long"] == 1 and counts["rejected"] == 1 and counts["admitted"] == 2


def test_max_model_len_is_the_limit_and_may_not_exceed_the_models_context(tmp_path):
    trace = _mooncake(tmp_path, [1000, 3000])
    cfg = load_config(["workload=mooncake_conversation", "workload.kind=trace", "workload.format=mooncake", f"workload.path={trace}",
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


# --- what vLLM refuses at start-up, advice that helps, keys no kind reads ----------------------


def test_max_model_len_beyond_the_kv_cache_vllm_sizes_is_refused_on_whole_gpus_as_on_slices():
    """vLLM's check_enough_kv_cache_memory refuses to start when one max_model_len sequence does not fit the
    cache it sizes from memory: Llama-3.1-8B on an RTX 4090 leaves 41,216 tokens for a 131,072-token context."""
    message = _config_error(["cluster.hardware=RTX4090"])
    assert message.startswith("config error: cluster.engine.max_model_len: 131072 tokens (max_model_len, llama-3.1-8b's")
    assert "vLLM refuses to start" in message and "set max_model_len to at most 41216" in message
    assert "raise gpu_memory_utilization" not in message  # even 1.0 leaves too little
    slice_message = _config_error(["cluster.mig.profile=1g.20gb"])  # the same rule on a MIG slice
    assert "cluster.mig.profile" in slice_message and "cluster.engine.max_model_len" in slice_message
    assert simulate(load_config([*TINY, "cluster.hardware=RTX4090", "cluster.engine.max_model_len=8192"])).summary


def test_a_pools_unknown_hardware_names_the_pools_key():
    message = _config_error(["cluster.pools=[{name: a, count: 1, hardware: TPU9}]"])
    assert message.startswith("config error: cluster.pools[0].hardware: unknown hardware 'TPU9'")
    assert _config_error(["cluster.hardware=TPU9", "cluster.pools=[{name: a, count: 1}]"]).startswith(
        "config error: cluster.hardware: unknown hardware 'TPU9'")


@pytest.mark.parametrize(
    "overrides, wanted, unwanted",
    [
        (["cluster.model=llama-3.1-70b"], ["raise tensor_parallel_size to 4"], ["gpu_memory_utilization to", "more memory"]),
        (["cluster.model=llama-3.1-70b", "cluster.gpus_per_node=2", "cluster.engine.tensor_parallel_size=2",
          "cluster.engine.gpu_memory_utilization=0.84", "cluster.engine.max_model_len=8192"],
         ["raise gpu_memory_utilization to 0.89", "H200"], ["tensor_parallel_size to"]),
        (["cluster.model=llama-3.1-70b", "cluster.gpus_per_node=2", "cluster.engine.tensor_parallel_size=2",
          "cluster.engine.gpu_memory_utilization=0.99", "cluster.engine.activation_reserve_fraction=0.2"],
         ["choose a GPU with more memory (H200"], ["gpu_memory_utilization to", "tensor_parallel_size to"]),
    ],
)
def test_out_of_memory_advice_names_only_what_would_make_it_fit(overrides, wanted, unwanted):
    message = _config_error(overrides)
    assert "does not fit on H100" in message, message
    for text in wanted:
        assert text in message, (text, message)
    for text in unwanted:
        assert text not in message, (text, message)


@pytest.mark.parametrize(
    "overrides, key, why",
    [
        (["cluster.latency.base_us=100"], "cluster.latency.base_us", "the roofline3 latency model"),
        (["cluster.latency.kind=roofline", "cluster.latency.routing_skew=1"], "cluster.latency.routing_skew",
         "the roofline latency model"),
        (["cluster.latency.kind=linear", "cluster.latency.base_us=100", "cluster.latency.per_prefill_token_us=1",
          "cluster.latency.per_decode_token_us=1", "cluster.latency.compute_efficiency=0.5"],
         "cluster.latency.compute_efficiency", "the linear latency model"),
        (["cluster.autoscale.max=8"], "cluster.autoscale.max", "cluster.autoscale.kind is null (no autoscaling), which"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=4", "cluster.autoscale.target=0.5"],
         "cluster.autoscale.target", "the autoscaler 'queue_slo'"),
        (["cluster.autoscale.kind=queue_slo", "cluster.autoscale.max=4", "cluster.autoscale.provision_s=10",
          "cluster.autoscale.load_gbps=5"], "cluster.autoscale.load_gbps", "the autoscaler 'queue_slo'"),
        (["+fitness.weights.slo_attainment=1"], "fitness.weights", "the fitness 'goodput'"),
        (["fitness=weighted", "fitness.per=dollar"], "fitness.per", "the fitness 'weighted'"),
        (["workload.mix={llm:0.9,vision:0.1}", "cluster.pools=[{name:llm,count:1},{name:vis,kind:runtime,"
          "model:resnet-50,runtime:{curve:{kind:fixed,batch_ms:5,overhead_ms:1}}}]"],
         "cluster.pools[1].runtime.curve.overhead_ms", "the fixed curve"),
    ],
)
def test_a_key_the_chosen_kind_does_not_read_warns(overrides, key, why):
    import re

    from distsim.resolve import resolve

    cfg = load_config([*TINY, *overrides])
    with pytest.warns(ConfigWarning, match=re.escape(f"{key}: is set, but {why}")):
        resolve(cfg)
