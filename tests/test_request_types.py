"""Request types (workload.mix) through the cluster and the runtimes: the mix's shares, the LLM requests'
draws unchanged, every request of every type conserved after every event, outputs only with a mix, and
bad input."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.events.loop import EventLoop
from distsim.report_table import format_summary
from distsim.request import Status
from distsim.resolve import resolve
from distsim.runtime.report import TypedRecorder
from distsim.simulate import summary_json
from distsim.workload import build_workload
from distsim.world import build

MIX = "workload.mix={llm:0.7,vision:0.2,asr:0.1}"
FLEET = ("cluster.pools=[{name:llm,count:2},"
         "{name:vis,kind:runtime,model:resnet-50,count:2,runtime:{max_batch_size:8,batch_window_ms:5,concurrency:2}},"
         "{name:asr,kind:runtime,model:whisper-small,count:1,runtime:{max_batch_size:4,batch_window_ms:20}}]")


def test_the_mix_shares_are_honoured_within_sampling_error():
    n = 20_000
    cfg = load_config([MIX, f"workload.num_requests={n}"])
    counts = Counter(r.rtype for r in build_workload(cfg.workload, seed=3))
    for name, share in (("llm", 0.7), ("vision", 0.2), ("asr", 0.1)):
        assert abs(counts[name] / n - share) < 4 * math.sqrt(share * (1 - share) / n), (name, counts)


def test_llm_requests_keep_their_draws_and_the_others_their_own_sizes():
    cfg_mix = load_config([MIX, "workload.num_requests=3000"])
    cfg_plain = load_config(["workload.num_requests=3000"])
    mixed = list(build_workload(cfg_mix.workload, seed=0))
    plain = list(build_workload(cfg_plain.workload, seed=0))
    assert [r.request_id for r in mixed] == list(range(3000))
    for a, b in zip(mixed, plain):
        assert a.arrival_us == b.arrival_us
        if a.rtype == "llm":
            assert (a.prompt_tokens, a.output_tokens, a.block_hashes) == (b.prompt_tokens, b.output_tokens, b.block_hashes)
        else:
            assert a.prompt_tokens == 0 and a.items >= 1 and a.latency_slo_ms in (200.0, 1000.0)
    vision = [r for r in mixed if r.rtype == "vision"]
    asr = [r for r in mixed if r.rtype == "asr"]
    assert {r.items for r in vision} == {1, 2, 3, 4} and {r.size for r in vision} == {224.0}
    assert all(2.0 <= r.size <= 30.0 for r in asr) and len({r.size for r in asr}) > 10


@pytest.mark.parametrize("mix", ["workload.mix={}", "workload.mix={llm:1}", "workload.mix=null", "workload.mix={llm:1,vision:0}"])
def test_no_mix_is_byte_identical(mix):
    base = simulate(load_config(["workload.num_requests=300"]))
    other = simulate(load_config(["workload.num_requests=300", mix]))
    assert summary_json(base.summary) == summary_json(other.summary)
    assert base.requests.equals(other.requests) and base.instances.equals(other.instances)


def run_checked(overrides: list[str]) -> tuple[TypedRecorder, object]:
    """The run of simulate.run, with every invariant checked after every event (INV-1 for every type)."""
    scenario = resolve(load_config(overrides))
    sim = scenario.sim
    loop = EventLoop(sim.horizon_us)
    parts = build(scenario, loop)  # the typed front over the cluster, the TypedRecorder
    recorder, front = parts.recorder, parts.world
    front.feed(scenario.workload)
    checked = []
    loop.after_event = lambda now: checked.append(len(front.check_invariants()))
    loop.run()
    front.finish(sim.horizon_us)
    assert checked
    return recorder, front


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["policy=least_loaded", "signals=stale_50ms"],
        ["policy=weighted", "policy.routing.latency_ms=2"],
        ["sim.horizon_s=4"],
        ["policy=power_of_two", "workload.arrival.rate_rps=60"],
    ],
)
def test_every_request_of_every_type_is_conserved_after_every_event(extra):
    n = 300
    recorder, front = run_checked([MIX, FLEET, f"workload.num_requests={n}", *extra])
    ids = [rec[0] for rec in recorder.rows()]
    arrived = front.arrived + front.cluster.arrived
    assert sorted(ids) == list(range(arrived))  # each recorded exactly once
    assert front.arrived == len(recorder.typed) and (arrived == n or "sim.horizon_s=4" in extra)
    kinds = Counter(t[0] for t in recorder.typed.values())
    assert kinds["vision"] > 0 and kinds["asr"] > 0
    if "sim.horizon_s=4" in extra:
        assert any(rec[5] == int(Status.UNFINISHED) for rec in recorder.rows())


def test_each_type_goes_only_to_the_pools_that_serve_it():
    result = simulate(load_config([MIX, FLEET, "workload.num_requests=400"]))
    req, inst = result.requests, result.instances
    pool_of = dict(zip(inst["instance"], inst["pool"]))
    where = {t: set(req.loc[req["type"] == t, "instance"].map(pool_of)) for t in ("llm", "vision", "asr")}
    assert where == {"llm": {"llm"}, "vision": {"vis"}, "asr": {"asr"}}
    assert result.summary["types"]["vision"]["batches"]["items"]["max"] <= 8
    assert (inst.loc[inst["pool"] == "asr", "max_batch_items"] <= 4).all()
    assert set(result.summary["types"]) == {"llm", "vision", "asr"}


def test_outputs_gain_type_columns_only_with_a_mix_and_batch_columns_only_with_a_runtime():
    plain = simulate(load_config(["workload.num_requests=50"]))
    assert "type" not in plain.requests and "types" not in plain.summary and "batches" not in plain.instances
    fleet = simulate(load_config([FLEET, "workload.num_requests=50"]))  # runtimes, but only LLM requests
    assert "type" not in fleet.requests and "types" not in fleet.summary and "batches" in fleet.instances
    mixed = simulate(load_config([MIX, FLEET, "workload.num_requests=50"]))
    assert {"type", "items", "size", "latency_slo_ms"} <= set(mixed.requests) and "types" in mixed.summary
    vision = mixed.requests[mixed.requests["type"] == "vision"]
    assert vision["ttft_ms"].isna().all() and vision["tpot_ms"].isna().all()
    assert (vision["met_slo"] == (vision["e2e_ms"] <= 200.0)).all()


def test_top_level_latencies_of_a_mixed_run_are_the_llm_requests():
    """Each type keeps its own section; the top-level TTFT, TPOT, E2E and queueing are the LLM requests',
    not a blend of token latencies with image and audio batch latencies."""
    result = simulate(load_config([MIX, FLEET, "workload.num_requests=300"]))
    req = result.requests
    llm = req[(req["type"] == "llm") & (req["status"] == "completed")]
    assert (req["type"] != "llm").sum() > 50
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert result.summary[key]["mean"] == pytest.approx(llm[key].mean(), abs=1e-3), key
        assert result.summary[key]["max"] == pytest.approx(llm[key].max(), abs=1e-3), key
    queued = req[(req["type"] == "llm") & req["queue_ms"].notna()]
    assert result.summary["queue_ms"]["mean"] == pytest.approx(queued["queue_ms"].mean(), abs=1e-3)
    assert result.summary["e2e_ms"]["mean"] == pytest.approx(result.summary["types"]["llm"]["latency_ms"]["mean"], abs=1e-3)
    assert "LLM latency ms" in format_summary(result.summary)


def test_a_mixed_run_is_deterministic():
    cfg = [MIX, FLEET, "workload.num_requests=200", "policy=random"]
    a, b = simulate(load_config(cfg)), simulate(load_config(cfg))
    assert summary_json(a.summary) == summary_json(b.summary) and a.requests.equals(b.requests)


def test_a_named_type_of_ones_own():
    result = simulate(load_config([
        "workload.mix={llm:0.5,ocr:0.5}", "+workload.types.ocr={items:{dist:fixed,value:2},slo_ms:50}",
        "cluster.pools=[{name:llm,count:1},{name:ocr,kind:runtime,model:vit-b-16,runtime:{serves:ocr,max_batch_size:4}}]",
        "workload.num_requests=100",
    ]))
    ocr = result.requests[result.requests["type"] == "ocr"]
    assert len(ocr) > 20 and (ocr["items"] == 2).all() and (ocr["status"] == "completed").all()


@pytest.mark.parametrize(
    "overrides, key",
    [
        ([MIX], "workload.mix.asr"),  # no pool serves asr (nor vision: the first in name order is named)
        (["workload.mix={llm:1,video:1}", FLEET], "workload.mix.video"),
        (["workload.mix={llm:-1,vision:1}", FLEET], "workload.mix.llm"),
        (["workload.mix={llm:0,vision:0}", FLEET], "workload.mix"),
        (["workload.mix=3", FLEET], "workload.mix"),
        ([MIX, FLEET, "+workload.types.vision.slo_ms=-5"], "workload.types.vision.slo_ms"),
        ([MIX, FLEET, "+workload.types.vision.items.dist=zipf"], "workload.types.vision.items.dist"),
        ([MIX, FLEET, "+workload.types.vision.size.value=oops"], "workload.types.vision.size.value"),
        ([MIX, FLEET, "workload.sessions.enabled=true"], "workload.mix"),
    ],
)
def test_bad_mix_is_one_config_error_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*overrides, "workload.num_requests=20"]))
    assert err.value.key == key


def test_items_per_second_counts_images():
    result = simulate(load_config([MIX, FLEET, "workload.num_requests=400"]))
    vision = result.requests[(result.requests["type"] == "vision") & (result.requests["status"] == "completed")]
    span_s = result.summary["sim"]["simulated_s"]
    assert result.summary["types"]["vision"]["throughput"]["items_per_s"] == pytest.approx(vision["items"].sum() / span_s, rel=1e-3)
    assert np.isfinite(result.summary["types"]["asr"]["latency_ms"]["p99"])


TRACE = ["workload=mooncake_conversation", "workload.kind=trace", "workload.format=csv", "workload.path=tests/fixtures/traces/typed.csv",
         "workload.num_requests=null"]


def test_a_trace_names_each_rows_type_and_size():
    result = simulate(load_config([*TRACE, FLEET]))
    req = result.requests
    assert req["type"].tolist() == ["llm", "vision", "llm", "asr", "vision", "llm"]
    assert req["items"].tolist() == [0, 2, 0, 1, 1, 0] and req["size"].tolist() == [0, 224, 0, 12.5, 0, 0]
    assert req.loc[req["type"] == "asr", "latency_slo_ms"].tolist() == [1000.0]
    assert (req["status"] == "completed").all() and set(result.summary["types"]) == {"llm", "vision", "asr"}


def test_a_traces_type_no_pool_serves_is_refused():
    with pytest.raises(ConfigError) as err:
        simulate(load_config(TRACE))
    assert err.value.key == "workload.path"


def test_a_broken_typed_row_names_the_file_and_line(tmp_path):
    from distsim.errors import InputFileError

    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens,type,items,size\n0,1,1,vision,0,224\n")
    with pytest.raises(InputFileError) as err:
        simulate(load_config([*TRACE[:3], f"workload.path={bad}", "workload.num_requests=null", FLEET]))
    assert err.value.line == 2


def test_a_key_of_a_built_in_type_overrides_only_that_key():
    cfg = load_config([MIX, "+workload.types.vision.slo_ms=100", "workload.num_requests=2000"])
    vision = [r for r in build_workload(cfg.workload, seed=0) if r.rtype == "vision"]
    assert {r.latency_slo_ms for r in vision} == {100.0} and {r.items for r in vision} == {1, 2, 3, 4}


def test_a_parquet_trace_carries_the_same_type_columns(tmp_path):
    import pandas as pd

    frame = pd.read_csv("tests/fixtures/traces/typed.csv")
    path = tmp_path / "typed.parquet"
    frame.to_parquet(path, index=False)
    from_csv = simulate(load_config([*TRACE, FLEET])).requests
    from_parquet = simulate(load_config(["workload=mooncake_conversation", "workload.kind=trace", "workload.format=parquet", f"workload.path={path}",
                                         "workload.num_requests=null", FLEET])).requests
    assert from_parquet[["type", "items", "size"]].equals(from_csv[["type", "items", "size"]])
