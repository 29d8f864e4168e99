"""vLLM's serving layer around the kernels (distsim/instance/latency/serving.py): CUDA-graph capture
sizes and padding, the all-reduce's path by message size, the host time async scheduling hides, the
sampler; each term on and off, by hand, and visible in instances.parquet and the timeline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from distsim import load_config, simulate
from distsim.catalog import load_hardware, load_model
from distsim.errors import ConfigError
from distsim.instance.latency.allreduce import NCCL_PCIE, NCCL_RING, all_reduce_us
from distsim.instance.latency.base import LatencyContext, StepShape
from distsim.instance.latency.roofline3 import DEFAULTS, Roofline3Latency
from distsim.instance.latency.serving import (
    ServingSettings,
    capture_sizes,
    settings_from,
)
from distsim.metrics.tables import SERVING_COLUMNS

H100 = load_hardware("H100")
LLAMA = load_model("llama-3.1-8b")
MIB = 1024 * 1024
SMALL_TP2 = ["workload.num_requests=200", "cluster.engine.tensor_parallel_size=2", "cluster.instances=1"]


SERVING = ServingSettings()


def roof(tp=1, model=LLAMA, hw=H100, async_scheduling=True, serving=SERVING, **k) -> Roofline3Latency:
    ctx = LatencyContext(model, hw, tp, max_num_seqs=256, max_num_batched_tokens=2048, async_scheduling=async_scheduling)
    return Roofline3Latency(ctx, dataclasses.replace(DEFAULTS, **k), serving)


def decode(b: int, ctx: int = 1000) -> StepShape:
    return StepShape(0, 0, 0, b, b * ctx)


def test_capture_sizes_follow_max_num_seqs_and_the_token_budget():
    sizes = capture_sizes(256, 2048)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert all(b - a == 8 for a, b in zip(sizes[3:33], sizes[4:33])) and 248 in sizes and 256 in sizes
    assert capture_sizes(8, 2048) == (1, 2, 4, 8, 16)
    assert capture_sizes(256, 100)[-1] == 96  # at most max_num_batched_tokens


def test_a_decode_batch_runs_at_the_next_captured_size_and_pays_for_the_padded_rows():
    on, off = roof(), roof(serving=ServingSettings(cuda_graphs=False), eager_layer_overhead_us=0.0)
    assert on.serving.padded(13) == 16 and on.serving.padded(16) == 16 and on.serving.padded(600) == 600
    assert off.serving.padded(13) == 13
    # by hand: the padded rows' matmuls and per-token kernels (TP 1: no collectives)
    assert on.breakdown(decode(13))["padding_us"] == pytest.approx(on._rows(16, 13) - on._rows(13, 13), rel=1e-12)
    assert on.breakdown(decode(13))["padding_us"] > 0 and on.breakdown(decode(16))["padding_us"] == 0
    assert off.breakdown(decode(13))["padding_us"] == 0
    assert on.step_us(decode(13)) > off.step_us(decode(13)) and on.step_us(decode(16)) == off.step_us(decode(16))


def test_a_step_without_a_graph_pays_launch_gaps_per_layer():
    on = roof(eager_layer_overhead_us=10.0)
    gaps = 10.0 * LLAMA.num_layers
    big = StepShape(600, 600 * 601 // 2, 600, 0, 0, 1)  # above the largest captured size (512)
    assert on.breakdown(big)["eager_us"] == gaps and on.breakdown(decode(13))["eager_us"] == 0.0
    assert on.step_us(big) - roof(eager_layer_overhead_us=0.0).step_us(big) in (gaps - 1, gaps, gaps + 1)
    eager = roof(eager_layer_overhead_us=10.0, serving=ServingSettings(cuda_graphs=False))
    assert eager.breakdown(decode(13))["eager_us"] == gaps and eager.breakdown(decode(13))["padding_us"] == 0.0


def test_the_all_reduce_takes_vllms_path_by_size_and_link():
    lat = 10.0
    link = 450.0
    # two GPUs under 8 MiB: one-shot custom all-reduce, latency + (tp - 1) bytes / link
    assert all_reduce_us(MIB, 2, link, True, True, True, lat, 64.0) == pytest.approx(10.0 + MIB / 450e3)
    # four GPUs: one-shot under 512 KiB, two-shot above (its barrier between the stages: 7 us here)
    assert all_reduce_us(256 * 1024, 4, link, True, True, True, lat, 64.0) == pytest.approx(10.0 + 3 * 262144 / 450e3)
    assert all_reduce_us(MIB, 4, link, True, True, True, lat, 64.0, 1.0, 7.0) == pytest.approx(17.0 + 1.5 * MIB / 450e3)
    # 8 MiB and over, or custom all-reduce off: NCCL's ring as Vidur's DGX profile fits
    fixed, per_step, bus = NCCL_RING
    ring = fixed + 3 * per_step
    assert all_reduce_us(8 * MIB, 4, link, True, True, True, lat, 64.0) == pytest.approx(ring + 1.5 * 8 * MIB / (bus * 450e3))
    assert all_reduce_us(MIB, 4, link, True, True, False, lat, 64.0) == pytest.approx(ring + 1.5 * MIB / (bus * 450e3))
    # PCIe: two GPUs with P2P keep the custom all-reduce; four are not fully connected: NCCL
    assert all_reduce_us(MIB, 2, 64.0, False, True, True, lat, 64.0) == pytest.approx(10.0 + MIB / 64e3)
    f, share = NCCL_PCIE
    assert all_reduce_us(MIB, 4, 64.0, False, True, True, lat, 64.0) == pytest.approx(f + MIB / (64e3 * share))
    # without P2P: NCCL through host memory at half the host link
    assert all_reduce_us(MIB, 2, 64.0, False, False, True, lat, 64.0) == pytest.approx(f + MIB / 32e3)
    assert all_reduce_us(MIB, 1, link, True, True, True, lat, 64.0) == 0.0


def test_collectives_in_the_step_are_two_all_reduces_per_layer():
    lm = roof(tp=2)
    b = 16
    one = all_reduce_us(b * LLAMA.hidden_size * 2, 2, H100.link_gbps_per_dir, True, True, True, DEFAULTS.all_reduce_latency_us,
                        H100.host_link_gbps_per_dir)
    assert lm.breakdown(decode(b))["all_reduce_us"] == pytest.approx(2 * LLAMA.num_layers * one, rel=1e-12)
    nccl = roof(tp=2, serving=ServingSettings(custom_all_reduce=False))
    assert nccl.breakdown(decode(b))["all_reduce_us"] > lm.breakdown(decode(b))["all_reduce_us"]


def test_async_scheduling_hides_host_time_up_to_the_gpu_step_and_adds_the_excess():
    shape = decode(8)
    small, big = 500.0, 50_000.0
    per_seq = 2.0
    hidden = roof(step_overhead_us=small, sequence_overhead_us=per_seq)
    assert hidden.breakdown(shape)["host_us"] == 0.0 and hidden.breakdown(shape)["host_work_us"] == small + 8 * per_seq
    assert hidden.step_us(shape) == roof(step_overhead_us=0.0).step_us(shape)
    over = roof(step_overhead_us=big - 8 * per_seq, sequence_overhead_us=per_seq)
    gpu = over.terms(8, 8)[0]  # the step's context-free GPU time
    assert over.breakdown(shape)["host_us"] == pytest.approx(big - gpu, rel=1e-12)
    sync = roof(step_overhead_us=small, sequence_overhead_us=0.0, async_scheduling=False)
    assert sync.breakdown(shape)["host_us"] == small
    assert sync.step_us(shape) - hidden.step_us(shape) in (small - 1, small, small + 1)
    # the setting overrides the engine's scheduling
    off = roof(step_overhead_us=small, sequence_overhead_us=0.0, serving=ServingSettings(host_overlap=False))
    assert off.breakdown(shape)["host_us"] == small


def test_sampling_costs_bytes_per_logit_of_each_sampled_row_and_a_call():
    lm = roof(sampler_bytes_per_logit=12.0, sampler_call_us=30.0, sampler_extra_rows=20.0)
    by_hand = (8 + 20) * LLAMA.vocab_size * 12.0 / (H100.hbm_bw_tbps * 1e6) / DEFAULTS.memory_efficiency + 30.0
    assert lm.breakdown(decode(8))["sampler_us"] == pytest.approx(by_hand, rel=1e-12)
    off = roof(sampler_bytes_per_logit=0.0, sampler_call_us=0.0)
    assert off.breakdown(decode(8))["sampler_us"] == 0.0
    assert lm.step_us(decode(8)) - off.step_us(decode(8)) in range(int(by_hand) - 1, int(by_hand) + 2)


def test_paged_kv_reads_cost_the_factor_in_serving_and_not_in_the_kernels():
    shape = decode(16, 4000)
    base, paged = roof(), roof(paged_kv_read_factor=1.5)
    assert paged.kernel_us(shape) == base.kernel_us(shape)  # the step tables see the stand-in's kernels
    t = base.breakdown(shape)
    assert t["paged_kv_us"] == 0.0
    kv = 16 * 4000 * LLAMA.kv_bytes_per_token_per_gpu(1) / (H100.hbm_bw_tbps * 1e6) / DEFAULTS.memory_efficiency
    assert paged.breakdown(shape)["paged_kv_us"] == pytest.approx(0.5 * kv, rel=1e-9)  # KV-bound: half the read again
    assert paged.step_us(shape) - base.step_us(shape) in range(int(0.5 * kv) - 1, int(0.5 * kv) + 2)


def test_the_sampling_path_picks_its_measured_terms_unless_they_are_set():
    from distsim.instance.latency.build import build_latency_model
    from distsim.instance.latency.serving import SAMPLERS

    ctx = LatencyContext(LLAMA, H100, 1)
    built = lambda **node: build_latency_model(OmegaConf.create({"kind": "roofline3", **node}), ctx)  # noqa: E731
    temperature = built(serving={"sampler": "temperature"})
    assert temperature.coefficients.sampler_call_us == SAMPLERS["temperature"][0] == DEFAULTS.sampler_call_us
    top = built(serving={"sampler": "top_k_top_p"}).coefficients
    assert (top.sampler_call_us, top.sampler_bytes_per_logit, top.sampler_extra_rows) == SAMPLERS["top_k_top_p"]
    assert built(serving={"sampler": "greedy"}, sampler_call_us=1.0).coefficients.sampler_call_us == 1.0
    sort = built(serving={"sampler": "top_k_top_p"}).breakdown(decode(16))["sampler_us"]
    assert sort > 4 * temperature.breakdown(decode(16))["sampler_us"]  # a sort of every row of 128k logits
    with pytest.raises(ConfigError, match="cluster.latency.serving.sampler"):
        settings_from({"serving": {"sampler": "beam"}})


def test_decode_runs_agree_with_single_steps_with_every_term_on():
    lm = roof(tp=2, step_overhead_us=20_000.0, sampler_bytes_per_logit=8.0, sampler_call_us=40.0, paged_kv_read_factor=1.3)
    for b in (1, 3, 13, 100, 300):
        steps = lm.decode_steps_us(b, 5000, 30)
        assert list(steps) == [lm.step_us(decode(b, 0)._replace(decode_ctx=5000 + j * b)) for j in range(30)]


def test_serving_settings_are_checked():
    assert settings_from({"serving": {"interconnect": "pcie", "p2p": False}}) == ServingSettings(interconnect="pcie", p2p=False)
    with pytest.raises(ConfigError, match="cluster.latency.serving.interconnect"):
        settings_from({"serving": {"interconnect": "infiniband"}})


def test_instances_and_the_timeline_show_the_serving_terms(tmp_path):
    result = simulate(load_config([*SMALL_TP2, "sim.timeline=true"]))
    inst = result.instances
    for name in SERVING_COLUMNS:
        assert name in inst.columns and (inst[name] >= 0).all()
    assert (inst["collectives_ms"] > 0).all() and (inst["padding_ms"] > 0).all()
    assert (inst[list(SERVING_COLUMNS)].sum(axis=1) < inst["busy_ms"]).all()
    result.write(tmp_path)
    steps = [e for e in json.loads((tmp_path / "timeline.json").read_text())["traceEvents"] if e.get("cat") == "step"]
    assert steps and all({"padding_us", "eager_us", "collectives_us", "sampler_us", "host_us"} <= set(e["args"]) for e in steps)
    off = simulate(load_config([*SMALL_TP2, "cluster.latency.serving.cuda_graphs=false"])).instances
    assert (off["padding_ms"] == 0).all()


def test_the_calibration_pipeline_is_one_command(capsys):
    from distsim.calibrate import main as calibrate_main

    runs = str(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h100_vllm_runs")
    assert calibrate_main(["residuals", runs, "--runs", "62"]) == 0
    out = capsys.readouterr().out
    assert "| 62 | Mistral-Nemo-Instruct-2407 | 2 |" in out and "collectives" in out


def test_the_auto_sampler_takes_the_path_the_models_generation_defaults_select():
    from distsim.instance.latency.build import build_latency_model
    from distsim.instance.latency.serving import SAMPLERS, generation_defaults, sampler_path

    # the catalog's generation defaults: top_p 0.9 (Llama 3.1), top_k 20 / top_p 0.8 (Qwen2.5), none (Yi-34B)
    assert generation_defaults("meta-llama/Llama-3.1-70B-Instruct".rsplit("/")[-1].lower()) is None  # keyed by distsim's names
    assert generation_defaults("llama-3.1-70b")["top_p"] == 0.9
    assert sampler_path("auto", "llama-3.1-70b") == "top_k_top_p"
    assert sampler_path("auto", "qwen2.5-7b") == "top_k_top_p"
    assert sampler_path("auto", "yi-34b") == "temperature"  # token ids only: vLLM's temperature 1
    assert sampler_path("auto", "a-model-nobody-knows") == "temperature"
    assert sampler_path("greedy", "llama-3.1-70b") == "greedy"  # an explicit path wins
    ctx = LatencyContext(LLAMA, H100, 1)
    built = lambda **node: build_latency_model(OmegaConf.create({"kind": "roofline3", **node}), ctx)  # noqa: E731
    auto = built()  # the default: Llama-3.1-8B's top_p 0.9 sorts every row
    assert (auto.coefficients.sampler_call_us, auto.coefficients.sampler_bytes_per_logit) == SAMPLERS["top_k_top_p"][:2]
    # by hand: a decode of 8 rows of Llama-3.1-8B's 128,256 logits on the sort path
    call, per_logit, extra = SAMPLERS["top_k_top_p"]
    bw = H100.hbm_bw_tbps * 1e6 * DEFAULTS.memory_efficiency  # bytes per us
    by_hand = call + (8 + extra) * LLAMA.vocab_size * per_logit / bw
    assert auto.breakdown(decode(8))["sampler_us"] == pytest.approx(by_hand, rel=1e-9)
    temp = built(serving={"sampler": "temperature"}).breakdown(decode(8))["sampler_us"]
    assert temp < by_hand / 4
