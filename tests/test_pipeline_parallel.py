"""Pipeline parallelism (cluster.engine.pipeline_parallel_size): INV-34 (a PP replica's stages are causal), the
stage-time algebra against the explicit timetable, a lone request's latency and the bubble, the throughput of
micro-batches in flight, KV blocks from each stage's memory, GPUs = TP x PP x replicas, determinism, bad values
as one line."""

from __future__ import annotations

import math

import pytest
from clikit import assert_user_error, run_module
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.catalog import load_hardware, load_model
from distsim.cluster.pools import resolve_pools
from distsim.errors import ConfigError, SimulationError
from distsim.instance.latency.base import StepShape
from distsim.instance.pipeline.partition import stage_kv_blocks, stage_layers, stage_weight_bytes
from distsim.instance.pipeline.timing import StageVisit, check_timetable, cycle_us, timetable
from distsim.request import Request

PP_CONF = ["cluster=pipeline_parallel", "cluster.instances=1"]


def pool(*overrides: str):
    return resolve_pools(load_config([*PP_CONF, *overrides]).cluster)[0]


def test_the_layers_are_partitioned_as_vllm_does_the_extra_ones_before_the_last_stage():
    assert stage_layers(80, 2) == (40, 40)
    assert stage_layers(61, 4) == (15, 15, 16, 15)  # vLLM's docs' example: the last stage gets none extra
    assert stage_layers(22, 4) == (5, 6, 6, 5)
    assert stage_layers(7, 4) == (2, 2, 2, 1)
    assert all(sum(stage_layers(n, p)) == n for n in range(1, 40) for p in range(1, n + 1))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1.0, 100.0), min_size=2, max_size=5).flatmap(
        lambda s: st.tuples(st.just(s), st.lists(st.floats(0.0, 30.0), min_size=len(s) - 1, max_size=len(s) - 1),
                            st.integers(1, len(s)))
    )
)
def test_stages_are_causal_and_the_steady_state_is_the_algebra(case):
    """INV-34 on the timetable, and its steady state: each micro-batch's pass takes max(S + C, m x max s)."""
    stages, sends, m = case
    rounds = 40
    visits = timetable(stages, sends, m, rounds)
    check_timetable(visits, stages, sends)
    first = {v.round: v.enter_us for v in visits if v.micro_batch == 0 and v.stage == 0}
    period = (first[rounds - 1] - first[rounds // 2]) / (rounds - 1 - rounds // 2)
    assert period == pytest.approx(cycle_us(stages, sends, m), rel=1e-6)


def test_a_lone_micro_batch_takes_every_stage_and_send_and_leaves_the_others_idle():
    """P stages of s, sends of c: one micro-batch's latency is P*s + (P-1)*c; each stage is busy 1/P of it
    at best (the bubble); P micro-batches complete P times as many per unit of time."""
    p, s, c = 4, 10.0, 2.0
    one = timetable([s] * p, [c] * (p - 1), 1, 1)
    assert one[-1].leave_us == p * s + (p - 1) * c
    assert cycle_us([s] * p, [c] * (p - 1), 1) == p * s + (p - 1) * c
    full = timetable([s] * p, [c] * (p - 1), p, 30)
    done = sorted(v.leave_us for v in full if v.stage == p - 1)
    interval = (done[-1] - done[-1 - 10 * p]) / (10 * p)  # over ten whole cycles
    assert interval == pytest.approx(s + (p - 1) * c / p)  # one micro-batch every s + (P-1)c/P: P x the lone rate
    assert (p * s + (p - 1) * c) / interval == pytest.approx(p)


def test_a_broken_timetable_is_refused_naming_the_invariant():
    stages, sends = [10.0, 10.0], [5.0]
    early = [StageVisit(0, 0, 0, 0.0, 10.0), StageVisit(0, 0, 1, 12.0, 22.0)]  # entered before the send landed
    with pytest.raises(SimulationError, match="INV-34"):
        check_timetable(early, stages, sends)
    overlap = [StageVisit(0, 0, 0, 0.0, 10.0), StageVisit(1, 0, 0, 5.0, 15.0)]
    with pytest.raises(SimulationError, match="INV-34: stage 0 ran two"):
        check_timetable(overlap, stages, sends)


def test_a_step_is_the_stages_over_its_micro_batches_and_sums_to_the_whole_model():
    p = pool()
    lat = p.latency
    lone = StepShape(0, 0, 0, 1, 600)
    stages = lat.stage_times(lone)
    assert sum(stages) == pytest.approx(lat.whole.step_us(lone))
    assert stages[-1] > stages[0]  # the last stage runs the LM head and the step's host work as well
    send = lat.links.send_us(1)[0]
    assert lat.step_us(lone) == math.floor(lat.whole.step_us(lone) + send + 0.5)
    full = StepShape(0, 0, 0, 256, 256 * 1000)
    half = StepShape(0, 0, 0, 128, 128 * 1000)
    assert lat.micro_batch(full) == (half, 2)
    assert lat.step_us(full) == math.floor(cycle_us(lat.stage_times(half), lat.links.send_us(128), 2) + 0.5)
    # decode runs planned in one go agree with the steps one by one
    assert lat.decode_steps(3, 900, 4) == [lat.step_us(StepShape(0, 0, 0, 3, 900 + 3 * j)) for j in range(4)]


def test_the_send_is_the_hidden_states_and_residual_over_the_boundary_link():
    model, h100 = load_model("llama-3.1-70b"), load_hardware("H100")
    inside = pool().latency.links  # TP4 x PP2: 8 GPUs in one node, NVLink
    assert inside.us_per_token[0] == pytest.approx(2 * model.hidden_size * 2 / 4 / h100.link_bytes_per_s * 1e6)
    across = pool("cluster.engine.tensor_parallel_size=8").latency.links  # TP8 x PP2: the stages on two nodes
    assert across.us_per_token[0] == pytest.approx(2 * model.hidden_size * 2 / 8 / 50e9 * 1e6)
    assert across.latency_us == (10.0,)


def test_a_lone_request_gains_nothing_from_the_stages_and_pays_the_send_each_token():
    """The bubble with one request: TP4 x PP2 decodes a lone request no faster than TP4 alone (each token
    crosses both stages in turn), one send (10 us + bytes) slower per token."""
    req = [Request(0, 0, 512, 64)]
    pp2 = simulate(load_config(PP_CONF), req).requests.iloc[0]
    pp1 = simulate(load_config([*PP_CONF, "cluster.engine.pipeline_parallel_size=1"]), [Request(0, 0, 512, 64)])
    pp1 = pp1.requests.iloc[0]
    send_ms = pool().latency.links.send_us(1)[0] / 1000
    assert pp2.tpot_ms - pp1.tpot_ms == pytest.approx(send_ms, abs=0.002)  # within the steps' rounding


def test_at_saturation_the_stages_work_on_micro_batches_at_once():
    """A full batch of 256 decoders on TP4 x PP2 is two micro-batches of 128 in flight: a step takes the
    cycle of two, far less than the same GPUs' stages taking the batch one after the other."""
    lat = pool().latency
    full, half = StepShape(0, 0, 0, 256, 256 * 1000), StepShape(0, 0, 0, 128, 128 * 1000)
    lone_cycle = sum(lat.stage_times(full)) + sum(lat.links.send_us(256))  # the whole batch as one micro-batch
    assert lat.step_us(full) < lone_cycle
    assert lat.step_us(full) == math.floor(max(sum(lat.stage_times(half)) + sum(lat.links.send_us(128)),
                                               2 * max(lat.stage_times(half))) + 0.5)


def test_kv_blocks_per_replica_are_what_every_stage_holds():
    model, hw = load_model("llama-3.1-70b"), load_hardware("H100")
    engine = load_config(PP_CONF).cluster.engine
    layers = stage_layers(80, 2)
    weights = stage_weight_bytes(model, 4, layers)
    assert sum(weights) == pytest.approx(model.weight_bytes_per_gpu(4) + 0)  # untied: embedding and head once each
    avail = hw.memory_bytes * (0.9 - 0.05)
    by_hand = min(math.floor((avail - w) / (16 * model.kv_bytes_per_token_per_gpu(4) * n / 80))
                  for w, n in zip(weights, layers))
    assert stage_kv_blocks(model, hw, engine, 4, layers, "cluster.engine") == by_hand == pool().engine.total_kv_blocks
    # the same 8 GPUs as TP8: each GPU holds the same share of weights and KV, so about the same blocks
    tp8 = pool("cluster.engine.pipeline_parallel_size=1", "cluster.engine.tensor_parallel_size=8").engine
    assert by_hand == pytest.approx(tp8.total_kv_blocks, rel=0.01)


def test_memory_besides_kv_counts_the_largest_stage_weights_not_the_whole_model():
    model = load_model("llama-3.1-70b")
    pp2, pp1 = pool(), pool("cluster.engine.pipeline_parallel_size=1")
    heaviest = max(stage_weight_bytes(model, 4, stage_layers(80, 2)))
    assert pp1.resident_bytes_per_gpu - pp2.resident_bytes_per_gpu == pytest.approx(
        model.weight_bytes_per_gpu(4) - heaviest)


def test_gpus_and_cost_count_tp_x_pp_x_replicas():
    cfg = load_config(["cluster=pipeline_parallel", "workload.num_requests=20"])
    result = simulate(cfg)
    assert list(result.instances["gpus"]) == [8, 8]
    one = simulate(load_config(["cluster=pipeline_parallel", "workload.num_requests=20",
                                "cluster.engine.pipeline_parallel_size=1", "cluster.engine.tensor_parallel_size=4"]))
    assert list(one.instances["gpus"]) == [4, 4]


def test_the_same_config_gives_the_same_run():
    cfg = load_config(["cluster=pipeline_parallel", "workload.num_requests=60"])
    a, b = simulate(cfg), simulate(cfg)
    assert a.requests.equals(b.requests) and a.instances.equals(b.instances)


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["pipeline_parallel_size=0"], "pipeline_parallel_size", "integer >= 1"),
        (["pipeline_parallel_size=81"], "pipeline_parallel_size", "80 layers"),
        (["pipeline.network_gbps=0"], "pipeline.network_gbps", "> 0"),
        (["pipeline.send_latency_us=-1"], "pipeline.send_latency_us", ">= 0"),
        (["speculative.method=eagle"], "pipeline_parallel_size", "speculative decoding"),
        (["data_parallel_size=2"], "pipeline_parallel_size", "data_parallel_size > 1"),
        (["tensor_parallel_size=16"], "tensor_parallel_size", "do not fit in one"),
    ],
)
def test_a_bad_pipeline_value_is_one_line_naming_the_key(overrides, key, words):
    cfg = load_config([*PP_CONF, "workload.num_requests=5", *(f"cluster.engine.{o}" for o in overrides)])
    with pytest.raises(ConfigError) as err:
        simulate(cfg)
    assert f"cluster.engine.{key}" in str(err.value) and words in str(err.value), str(err.value)


def test_pipeline_parallelism_under_pd_is_refused():
    cfg = load_config(["cluster=pd_disagg", "workload.num_requests=5", "cluster.model=llama-3.1-70b",
                       "cluster.engine.tensor_parallel_size=4", "cluster.engine.pipeline_parallel_size=2"])
    with pytest.raises(ConfigError, match="pipeline_parallel_size: pipeline parallelism is not modelled with P/D"):
        simulate(cfg)


def test_a_bad_pipeline_value_exits_2_on_the_command_line():
    proc = run_module("distsim", "cluster=pipeline_parallel", "workload.num_requests=5",
                      "cluster.engine.pipeline_parallel_size=0")
    assert_user_error(proc, 2, "cluster.engine.pipeline_parallel_size")


def test_a_stage_moves_its_layers_share_of_a_block_to_the_cpu_tier():
    from distsim.cluster.build import cpu_tier

    model = load_model("llama-3.1-70b")
    pp2 = cpu_tier(pool("cluster.engine.cpu_kv_blocks=100"))
    pp1 = cpu_tier(pool("cluster.engine.cpu_kv_blocks=100", "cluster.engine.pipeline_parallel_size=1"))
    assert pp1.block_bytes == model.kv_bytes_per_token_per_gpu(4) * 16
    assert pp2.block_bytes == pytest.approx(pp1.block_bytes / 2)  # 40 of the 80 layers on each GPU


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**16), st.integers(2, 4))
def test_a_pipelined_engine_keeps_its_invariants_and_a_run_planned_in_one_go_is_the_steps_one_by_one(seed, pp):
    """The engine's invariants (docs/invariants.md) after every event, on a pipelined replica; fast-forwarded
    decode runs give exactly what stepping one by one gives (INV-8 with the pipelined step model)."""
    import numpy as np
    from simkit import run

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(20_000.0, 40)).astype(np.int64)
    reqs = lambda: [Request(i, int(t), int(rng2.integers(16, 3000)), int(rng2.integers(1, 200)))  # noqa: E731
                    for i, t, rng2 in ((i, t, np.random.default_rng([seed, i])) for i, t in enumerate(arrivals))]
    spec = pool(f"cluster.engine.pipeline_parallel_size={pp}", "cluster.engine.tensor_parallel_size=2")
    a = run(reqs(), pools=[spec], check_every_event=True).recorder.table()
    b = run(reqs(), pools=[spec], fast_forward=False).recorder.table()
    assert a.equals(b)
    assert (a["status"] == "completed").all()


def test_a_pool_pipelines_its_replicas_on_its_own():
    from distsim.instance.pipeline.latency import PipelineLatency

    cfg = load_config(["cluster=heterogeneous", "cluster.pools=[{name:a,count:1,hardware:H100,role:mixed,"
                       "engine:{pipeline_parallel_size:2}},{name:b,count:1,hardware:H100,role:mixed}]"])
    a, b = resolve_pools(cfg.cluster)
    assert (a.pipeline_parallel_size, b.pipeline_parallel_size) == (2, 1)
    assert isinstance(a.latency, PipelineLatency) and not isinstance(b.latency, PipelineLatency)
    assert a.engine.max_num_batched_tokens == 2 * b.engine.max_num_batched_tokens  # a budget per micro-batch
