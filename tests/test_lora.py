"""LoRA adapters (cluster.engine.lora, workload.lora; distsim/lora): INV-33 (at most max_loras adapters in
GPU slots, so in a step; every request runs only once its adapter is loaded), the LRU order of the GPU slots
and the CPU cache (vLLM's two-level walk-through), load-time and KV arithmetic, the step cost, the adapter
popularity and its own stream, trace adapters, determinism, lora_affinity against round robin, and bad
values as one line naming the key."""

from __future__ import annotations

import numpy as np
import pytest
from clikit import assert_user_error, run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import FAKE_HW, engine, run, tiny_model

from distsim import load_config, simulate
from distsim.catalog import load_hardware, load_model
from distsim.cluster.pools import resolve_pools
from distsim.errors import ConfigError, InputFileError
from distsim.lora.settings import LoraSettings
from distsim.lora.sizes import adapter_bytes, adapter_bytes_per_gpu
from distsim.lora.slots import AdapterSlots
from distsim.lora.step_cost import LoraStepCost
from distsim.request import Request
from distsim.resolve import resolve
from distsim.workload import build_workload

LORA = ["cluster=lora", "workload=lora_zipf"]


def settings_for(max_loras=2, max_cpu=3, rank=8, model=None, hw=FAKE_HW, disk_bps=1e9) -> LoraSettings:
    model = model or tiny_model(1000)
    return LoraSettings(max_loras, rank, max_cpu, disk_bps, model, 1, hw.host_link_gbps_per_dir * 1e9,
                        hw.hbm_bw_tbps * 1e12, hw.peak_flops)


def adapter_requests(n: int, adapters: int, seed: int = 1, gap_us: float = 400.0) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_us, n)).astype(np.int64)
    reqs = []
    for i in range(n):
        req = Request(i, int(t[i]), int(rng.integers(4, 40)), int(rng.integers(1, 40)))
        a = int(rng.integers(-1, adapters))  # -1: the base model
        req.adapter = a
        reqs.append(req)
    return reqs


class SlotProbe:
    """After each event: every invariant (INV-33 among them), and the largest number of distinct adapters
    the running batch of an engine held."""

    def __init__(self):
        self.most = 0

    def __call__(self, sim, now):
        sim.cluster.check_invariants()
        for inst in sim.cluster.instances:
            held = {r.adapter for r in inst.running.values() if r.adapter >= 0}
            assert len(held) <= inst.lora.capacity
            assert len(inst.lora.gpu) <= inst.lora.capacity and len(inst.lora.cpu) <= inst.lora.cpu_capacity
            for a in held:
                assert inst.lora.ready(a, now), f"adapter {a} runs before it is loaded"
            self.most = max(self.most, len(held))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), max_loras=st.integers(1, 3), adapters=st.integers(1, 6),
       fast_forward=st.booleans(), asynchronous=st.booleans(), scheduler=st.sampled_from(["fcfs", "priority"]))
def test_at_most_max_loras_adapters_in_a_step_and_each_loaded_before_it_runs(seed, max_loras, adapters, fast_forward,
                                                                             asynchronous, scheduler):
    probe = SlotProbe()
    reqs = adapter_requests(60, adapters, seed)
    params = engine(lora=settings_for(max_loras, max_loras + 1), async_scheduling=asynchronous, scheduler=scheduler)
    sim = run(reqs, params, instances=2, fast_forward=fast_forward, after_event=probe)
    assert all(r.completion_us > 0 for r in reqs)
    assert probe.most <= max_loras
    counts = [inst.lora.counts for inst in sim.cluster.instances]
    assert sum(c.hits + c.misses for c in counts) == sum(r.adapter >= 0 for r in reqs)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_fast_forwarding_gives_the_same_results_as_stepping_one_by_one(asynchronous):
    def times(ff):
        reqs = adapter_requests(80, 5, seed=3, gap_us=150.0)
        run(reqs, engine(lora=settings_for(2, 3), async_scheduling=asynchronous), instances=2, fast_forward=ff)
        return [(r.first_token_us, r.completion_us) for r in reqs]

    assert times(True) == times(False)


def test_the_slots_and_the_cpu_cache_evict_least_recently_used_first():
    """vLLM's walk-through (max_loras 2, max_cpu_loras 3; adapters a b c d = 0 1 2 3): a, b from disk; c from
    disk evicting a's slot; a from the CPU cache evicting b's; d from disk, dropping b from the cache."""
    slots = AdapterSlots(2, 3, settings_for(2, 3))
    t = 0
    for adapter in (0, 1):
        t = slots.start_load(adapter, t)
        slots.pin(adapter)
    slots.unpin(0)
    slots.unpin(1)
    assert slots.counts.disk_loads == 2 and list(slots.gpu) == [0, 1]
    slots.pin(1)  # b is used again: a is now the least recent
    slots.unpin(1)
    t = slots.start_load(2, t)
    assert list(slots.gpu) == [1, 2] and list(slots.cpu) == [0, 1, 2]
    t = slots.start_load(0, t)  # a: cached, so no disk read; b's slot goes
    assert slots.counts.cpu_loads == 1 and list(slots.gpu) == [2, 0]
    t = slots.start_load(3, t)  # d: from disk; the cache drops its oldest (b)
    assert list(slots.gpu) == [0, 3] and list(slots.cpu) == [2, 0, 3]
    assert slots.counts.disk_loads == 4 and slots.counts.gpu_evictions == 3 and slots.counts.cpu_evictions == 1


def test_a_slot_in_use_is_never_given_up():
    slots = AdapterSlots(1, 2, settings_for(1, 2))
    t = slots.start_load(0, 0)
    slots.pin(0)
    assert slots.start_load(1, t) is None  # the one slot serves a running request
    slots.unpin(0)
    assert slots.start_load(1, t) is not None


def test_load_times_are_the_adapter_bytes_over_the_disk_and_the_host_link():
    model, hw = load_model("llama-3.1-8b"), load_hardware("H100")
    # per layer and unit of rank: A and B of qkv (3 x 4096, 4096 + 2 x 1024), o (4096, 4096),
    # gate_up (2 x 4096, 2 x 14336), down (14336, 4096)
    per_layer = 3 * 4096 + 6144 + 4096 + 4096 + 2 * 4096 + 2 * 14336 + 14336 + 4096
    assert per_layer == 81920
    assert adapter_bytes(model, 16) == 32 * per_layer * 16 * 2 == 83_886_080
    s = settings_for(4, 16, 16, model, hw, disk_bps=2e9)
    assert s.disk_us(16) == round(83_886_080 / 2e9 * 1e6) == 41943
    assert s.host_us(16) == round(83_886_080 / (hw.host_link_gbps_per_dir * 1e9) * 1e6)
    # under TP 2: column-parallel B and row-parallel A split, the rest whole
    half = 3 * 4096 + (4096 + 2048) / 2 + 4096 / 2 + 4096 + 2 * 4096 + 2 * 14336 / 2 + 14336 / 2 + 4096
    assert adapter_bytes_per_gpu(model, 2, 16) == 32 * half * 16 * 2


def test_the_adapter_slots_come_out_of_the_kv_cache():
    base = resolve_pools(load_config(["cluster=lora", "cluster.engine.lora.max_loras=null"]).cluster)[0]
    lora = resolve_pools(load_config(["cluster=lora"]).cluster)[0]
    slot_bytes = 4 * 83_886_080  # max_loras 4 at rank 16 on one GPU
    block_bytes = 131072 * 16  # Llama-3.1-8B's KV per token, 16 tokens a block
    assert base.engine.total_kv_blocks - lora.engine.total_kv_blocks == -(-slot_bytes // block_bytes) == 160
    given = resolve_pools(load_config(["cluster=lora", "cluster.engine.total_kv_blocks=9000"]).cluster)[0]
    assert given.engine.total_kv_blocks == 9000  # vLLM's num_gpu_blocks_override is taken as given


def test_the_step_cost_grows_with_distinct_adapters_and_rank_and_is_zero_without_one():
    model, hw = load_model("llama-3.1-8b"), load_hardware("H100")
    cost = LoraStepCost(settings_for(8, 8, 16, model, hw))
    assert cost.us(64, 0) == 0
    assert cost.us(64, 1) < cost.us(64, 2) < cost.us(64, 8)
    assert cost.us(64, 4) == round(4 * 83_886_080 / 3.35e12 * 1e6)  # decode: the slots' bytes over HBM
    assert LoraStepCost(settings_for(8, 8, 64, model, hw)).us(64, 4) > cost.us(64, 4)
    big = cost.us(8192, 1)  # a long prefill: the FLOPs over the tensor peak
    assert big == round(8192 * 2 * 16 * 32 * 81920 / (hw.bf16_tflops * 1e12) * 1e6)


def test_adapters_follow_the_zipf_popularity_from_their_own_stream():
    cfg = load_config(["workload=lora_zipf", "workload.num_requests=4000"])
    plain = list(build_workload(load_config(["workload.num_requests=4000"]).workload, seed=0))
    reqs = list(build_workload(cfg.workload, seed=0))
    assert [(r.arrival_us, r.prompt_tokens, r.output_tokens) for r in reqs] == \
        [(r.arrival_us, r.prompt_tokens, r.output_tokens) for r in plain]  # the other streams did not move
    adapters = np.array([r.adapter for r in reqs])
    assert abs((adapters < 0).mean() - 0.1) < 0.02
    counts = np.bincount(adapters[adapters >= 0], minlength=32)
    expected = np.arange(1, 33) ** -1.0
    expected = expected / expected.sum() * counts.sum()
    assert np.all(np.abs(counts[:4] - expected[:4]) < 4 * np.sqrt(expected[:4]))
    assert list(build_workload(cfg.workload, seed=0))[7].adapter == reqs[7].adapter


def test_the_same_prompt_under_two_adapters_shares_no_cached_block():
    reqs = list(build_workload(load_config(["workload=lora_zipf", "workload.num_requests=300"]).workload, seed=0))
    keys = {}
    for r in reqs:
        if r.block_hashes:
            keys.setdefault(r.adapter, set()).add(r.block_hashes[0])
    named = [a for a in keys if a >= 0]
    assert keys[named[0]].isdisjoint(keys[named[1]])


def test_a_trace_names_each_requests_adapter(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,adapter\n0.0,10,5,2\n0.5,12,6,\n1.0,8,4,0\n")
    over = ["workload=azure_code", "workload.format=csv", f"workload.path={path}", "workload.lora.adapters=4"]
    reqs = list(build_workload(load_config(over).workload, seed=0))
    assert [r.adapter for r in reqs[:1] + reqs[2:]] == [2, 0]
    assert reqs[1].adapter in range(-1, 4)  # an empty cell: drawn from the popularity
    path.write_text("arrival_s,input_tokens,output_tokens,adapter\n0.0,10,5,7\n")
    with pytest.raises(InputFileError, match="adapter 7 is not in the catalog"):
        build_workload(load_config(over).workload, seed=0)


def test_the_same_config_gives_the_same_results():
    cfg = load_config([*LORA, "workload.num_requests=200"])
    a, b = simulate(cfg), simulate(cfg)
    assert a.summary == b.summary and a.requests.equals(b.requests) and a.instances.equals(b.instances)
    assert {"lora_hits", "lora_disk_loads", "lora_load_ms"} <= set(a.instances.columns)
    assert a.requests["adapter"].between(-1, 31).all() and (a.requests["adapter"] >= 0).sum() > 150
    assert a.summary["lora"]["requests_with_adapter"] == a.summary["lora"]["hits"] + a.summary["lora"]["misses"]


def test_lora_affinity_raises_the_hit_rate_over_round_robin():
    common = [*LORA, "workload.num_requests=600", "workload.arrival.rate_rps=10", "cluster.engine.lora.max_loras=2",
              "workload.lora.adapters=12"]
    rr = simulate(load_config(common)).summary["lora"]["hit_rate"]
    affine = simulate(load_config([*common, "policy=weighted",
                                   "policy.routing.scorers={lora_affinity: 3, queue_depth: 1}"])).summary["lora"]["hit_rate"]
    assert affine > rr + 0.1, (rr, affine)


def test_runs_without_lora_have_no_lora_columns():
    result = simulate(load_config(["workload.num_requests=50"]))
    assert "lora" not in result.summary and not any(c.startswith("lora_") for c in result.instances.columns)
    assert "adapter" not in result.requests.columns


@pytest.mark.parametrize("override, key", [
    ("cluster.engine.lora.max_loras=0", "cluster.engine.lora.max_loras"),
    ("cluster.engine.lora.max_lora_rank=1024", "cluster.engine.lora.max_lora_rank"),
    ("cluster.engine.lora.max_cpu_loras=2", "cluster.engine.lora.max_cpu_loras"),
    ("cluster.engine.lora.disk_read_gbps=null", "cluster.engine.lora.disk_read_gbps"),
    ("cluster.engine.lora.disk_read_gbps=-1", "cluster.engine.lora.disk_read_gbps"),
    ("workload.lora.adapters=-1", "workload.lora.adapters"),
    ("workload.lora.ranks=[8,16]", "workload.lora.ranks"),
    ("workload.lora.zipf_s=-1", "workload.lora.zipf_s"),
    ("workload.lora.base_share=1.0", "workload.lora.base_share"),
    ("workload.lora.rank=32", "workload.lora.rank"),
    ("cluster.engine.lora.max_loras=null", "workload.lora.adapters"),
    ("cluster.model=deepseek-v2-lite", "cluster.engine.lora.max_loras"),
])
def test_a_bad_value_is_one_line_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        resolve(load_config([*LORA, override]))
    assert err.value.key == key and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("cluster.engine.lora.max_cpu_loras=2", "cluster.engine.lora.max_cpu_loras"),
    ("workload.lora.rank=32", "workload.lora.rank"),
])
def test_the_cli_exits_2_with_one_line(override, key):
    proc = run_module("distsim", *LORA, override, "workload.num_requests=5")
    assert_user_error(proc, 2, key)


def test_lora_under_pd_disaggregation_is_refused():
    with pytest.raises(ConfigError) as err:
        resolve(load_config(["cluster=pd_disagg", "cluster.engine.lora.max_loras=2", "cluster.engine.lora.disk_read_gbps=2"]))
    assert err.value.key == "cluster.pools[0].engine.lora.max_loras"


def test_adapters_with_a_pool_without_lora_are_refused():
    pools = "cluster.pools=[{name:a,count:2,engine:{lora:{max_loras:2,disk_read_gbps:2}}},{name:b,count:2}]"
    with pytest.raises(ConfigError, match="pool b does not enable LoRA") as err:
        resolve(load_config(["workload=lora_zipf", pools]))
    assert err.value.key == "workload.lora.adapters"


def test_the_lora_terminal_reads_the_directory_and_stays_out_of_evolution():
    from distsim.policies.expression.grammar import TERMINAL
    from distsim.search.gp import primitive_set

    assert not TERMINAL["lora_resident"].evolved
    assert "lora_resident" not in primitive_set().mapping
    cfg = load_config([*LORA, "workload.num_requests=200", "policy=expression",
                       "policy.routing.expression='lora_resident - queue_frac'"])
    assert simulate(cfg).summary["lora"]["hit_rate"] is not None
