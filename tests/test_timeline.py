"""The timeline (sim.timeline, distsim.timeline): timeline.json read back and checked against the
run's own tables (requests.parquet: every request's slice and phases; instances.parquet: every instance's
busy time and steps), its flows (one per KV transfer, one per hedge copy), the front's decisions, the
window, that it changes no output and repeats byte for byte, and bad settings.

Runs are small (300 requests of the default workload unless said)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from clikit import ROOT, assert_user_error, run_module

from distsim import load_config, simulate
from distsim.errors import ConfigError, ConfigWarning
from distsim.runner.job import execute
from distsim.runner.plan import Job

SMALL = ["workload.num_requests=300"]
PD = ["cluster=pd_disagg"]
HEDGED = ["policy=hedged", "policy.hedge.delay_slo_fraction=null", "policy.hedge.delay_ms=30", "workload.arrival.rate_rps=40"]
CELLS = ["cluster.cells.count=4", "cluster.instances=8", "cluster.cells.front_policy=nearest",
         "cluster.cells.summary_interval_ms=1000", "cluster.cells.rtt.spread_ms=40", "cluster.cells.spill.threshold=2",
         "workload.arrival.rate_rps=200"]  # a stale front herds; the cells spill over


def run_dir(tmp_path: Path, *overrides: str, name: str = "run", timeline: bool = True) -> Path:
    """A run written to ``tmp_path/name`` as the CLI writes it (in-process)."""
    out = tmp_path / name
    result = simulate(load_config([*SMALL, *overrides, f"sim.timeline={str(timeline).lower()}"]))
    result.write(out)
    return out


def load(out: Path) -> tuple[list[dict], pd.DataFrame, pd.DataFrame, dict]:
    trace = json.loads((out / "timeline.json").read_text())
    assert trace["displayTimeUnit"] == "ms"
    summary = json.loads((out / "summary.json").read_text())
    return trace["traceEvents"], pd.read_parquet(out / "requests.parquet"), pd.read_parquet(out / "instances.parquet"), summary


def us(ms: float) -> int:
    return int(round(ms * 1000.0))


def request_events(events: list[dict]) -> dict[int, list[tuple[str, str, int]]]:
    """Per request id: its async events (phase, name, ts) in file order."""
    out: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "request":
            out[e["id"]].append((e["ph"], e["name"], e["ts"]))
    return out


def phases_of(seq: list[tuple[str, str, int]]) -> dict[str, tuple[int, int]]:
    """A request's nested phases: name -> (begin, end), checking they nest in the request's slice."""
    assert seq[0][0] == "b" and seq[-1][0] == "e" and seq[0][1] == seq[-1][1]
    begun: dict[str, int] = {}
    out = {}
    for ph, name, ts in seq[1:-1]:
        if ph == "b":
            begun[name] = ts
        else:
            out[name] = (begun.pop(name), ts)
    assert not begun
    return out


def test_every_request_slice_spans_arrival_to_finish_with_its_phases(tmp_path):
    out = run_dir(tmp_path, "sim.horizon_s=9")  # some are unfinished at 9 s
    events, requests, _, _ = load(out)
    end_us = json.loads((out / "timeline.json").read_text())["otherData"]["end_us"]
    assert end_us == 9_000_000
    by_id = request_events(events)
    assert set(by_id) == set(requests["request_id"])
    statuses = set()
    for row in requests.itertuples():
        seq = by_id[row.request_id]
        statuses.add(row.status)
        assert seq[0] == ("b", f"request {row.request_id}", us(row.arrival_ms))
        phases = phases_of(seq)
        assert phases["queue"][0] == us(row.arrival_ms)
        if row.queue_ms != row.queue_ms:  # never scheduled (NaN): unfinished, queued until the horizon
            assert row.status == "unfinished" and phases["queue"][1] == end_us and "prefill" not in phases
            continue
        assert phases["queue"][1] == us(row.arrival_ms + row.queue_ms) == phases["prefill"][0]
        if row.status == "completed":
            assert seq[-1][2] == us(row.completion_ms)
            assert phases["prefill"][1] == us(row.first_token_ms)
            if row.output_tokens > 1:
                assert phases["decode"] == (us(row.first_token_ms), us(row.completion_ms))
        else:
            assert row.status == "unfinished" and seq[-1][2] == end_us
    assert statuses == {"completed", "unfinished"}
    assert [e["ts"] for e in events if e["ph"] != "M"] == sorted(e["ts"] for e in events if e["ph"] != "M")


@pytest.mark.parametrize("fast_forward", [True, False])
def test_step_slices_sum_to_each_instance_busy_time_and_steps(tmp_path, fast_forward):
    out = run_dir(tmp_path, "cluster.instances=2", f"sim.fast_forward={str(fast_forward).lower()}")
    events, _, instances, _ = load(out)
    busy, steps, slices = defaultdict(int), defaultdict(int), defaultdict(list)
    for e in events:
        if e.get("cat") == "step":
            busy[e["pid"] - 1] += e["dur"]
            steps[e["pid"] - 1] += e["args"]["steps"]
            slices[e["pid"] - 1].append((e["ts"], e["ts"] + e["dur"]))
            assert e["args"]["phase"] == e["name"] and e["tid"] == 1
            if not fast_forward:
                assert e["args"]["steps"] == 1  # stepping: one slice per step
    for row in instances.itertuples():
        assert busy[row.instance] == us(row.busy_ms), row.instance
        assert steps[row.instance] == row.steps
        spans = slices[row.instance]
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # an engine runs one step at a time
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"instance 0 (default, mixed, H100)", "instance 1 (default, mixed, H100)"}
    if fast_forward:
        assert any(e.get("cat") == "step" and e["args"]["steps"] > 1 for e in events)


def flows(events: list[dict], cat: str) -> dict[int, dict[str, dict]]:
    """bind_id -> {"flow_out": marker, "flow_in": marker} for the flows of category ``cat``."""
    out: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in events:
        if e.get("cat") == cat:
            key = "flow_out" if e.get("flow_out") else "flow_in"
            assert e.get(key) is True and e["ph"] == "X" and e["dur"] == 0 and e["tid"] == 2
            assert key not in out[e["bind_id"]]
            out[e["bind_id"]][key] = e
    return out


def test_a_pd_run_has_one_flow_per_kv_transfer(tmp_path):
    events, requests, _, summary = load(run_dir(tmp_path, *PD))
    kv = flows(events, "kv_transfer")
    assert len(kv) == summary["kv_transfer"]["transfers"] > 0
    rows = requests.set_index("request_id")
    roles = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    by_id = request_events(events)
    for pair in kv.values():
        out, inn = pair["flow_out"], pair["flow_in"]
        row = rows.loc[out["args"]["request"]]
        assert out["pid"] == row.prefill_instance + 1 and "prefill" in roles[out["pid"]]
        assert inn["pid"] == row.instance + 1 and "decode" in roles[inn["pid"]]
        assert inn["ts"] - out["ts"] == out["args"]["transfer_us"] > 0
        phases = phases_of(by_id[out["args"]["request"]])
        assert phases["kv_transfer"][1] == us(row.first_token_ms)  # the first token comes with the KV
        assert phases["kv_transfer"][0] <= out["ts"] and inn["ts"] <= phases["kv_transfer"][1]


def test_a_hedged_run_has_one_flow_per_hedge_copy(tmp_path):
    events, _, _, summary = load(run_dir(tmp_path, *HEDGED))
    hedges = flows(events, "hedge")
    assert len(hedges) == summary["hedging"]["copies_sent"] > 0
    for pair in hedges.values():
        out, inn = pair["flow_out"], pair["flow_in"]
        assert out["ts"] == inn["ts"] and out["pid"] != inn["pid"]
        assert out["args"]["request"] == inn["args"]["request"] and out["args"]["copy"] < 0


def test_a_cells_run_has_the_front_routers_decisions_as_instants(tmp_path):
    events, requests, instances, summary = load(run_dir(tmp_path, *CELLS))
    instants = [e for e in events if e["ph"] == "i"]
    routed = [e for e in instants if e["name"].startswith("route to cell")]
    spills = [e for e in instants if e["name"].startswith("spill")]
    assert len(routed) == summary["requests"]["arrived"]
    assert sorted(e["args"]["request"] for e in routed) == sorted(requests["request_id"])
    assert len(spills) == summary["cells"]["spilled"] > 0
    assert all(e["s"] == "t" and e["cat"] == "front" for e in instants)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names[routed[0]["pid"]] == "front and cells"
    assert names[1] == "instance 0 (default, mixed, H100, cell 0)" and names[8] == "instance 7 (default, mixed, H100, cell 3)"
    for row in instances.itertuples():  # the cells' instances are all there, busy as instances.parquet says
        assert sum(e["dur"] for e in events if e.get("cat") == "step" and e["pid"] == row.instance + 1) == us(row.busy_ms)


def test_the_window_keeps_what_overlaps_it_and_only_that(tmp_path):
    full, _, _, _ = load(run_dir(tmp_path, name="full"))
    part, _, _, _ = load(run_dir(tmp_path, "sim.timeline_start_s=3", "sim.timeline_end_s=5", name="part"))
    lo, hi = 3_000_000, 5_000_000

    def steps(events):
        return [e for e in events if e.get("cat") == "step"]

    kept = steps(part)
    assert 0 < len(kept) < len(steps(full))
    assert all(e["ts"] + e["dur"] > lo and e["ts"] < hi for e in kept)
    assert kept == [e for e in steps(full) if e["ts"] + e["dur"] > lo and e["ts"] < hi]  # whole, not cut
    spans = {}
    for rid, seq in request_events(part).items():
        spans[rid] = (seq[0][2], seq[-1][2])
        assert seq[-1][2] > lo and seq[0][2] < hi
    overlapping = {rid for rid, seq in request_events(full).items() if seq[-1][2] > lo and seq[0][2] < hi}
    assert set(spans) == overlapping and len(overlapping) < len(request_events(full))


@pytest.mark.parametrize("layout", [[], PD, HEDGED, CELLS, ["cluster=mixed_fleet", "workload=mixed_70_20_10"]],
                         ids=["default", "pd", "hedged", "cells", "runtimes"])
def test_the_timeline_changes_no_output_and_repeats_byte_for_byte(tmp_path, layout):
    on = run_dir(tmp_path, *layout, name="on")
    off = run_dir(tmp_path, *layout, name="off", timeline=False)
    again = run_dir(tmp_path, *layout, name="again")
    for name in ("summary.json", "requests.parquet", "instances.parquet"):
        assert (on / name).read_bytes() == (off / name).read_bytes(), name
    assert not (off / "timeline.json").exists()
    assert (on / "timeline.json").read_bytes() == (again / "timeline.json").read_bytes()
    simulate(load_config([*SMALL, *layout])).write(on)  # a later run without it leaves no stale timeline
    assert not (on / "timeline.json").exists()


def test_batching_runtime_replicas_have_their_batches(tmp_path):
    events, _, instances, _ = load(run_dir(tmp_path, "cluster=mixed_fleet", "workload=mixed_70_20_10"))
    for row in instances[instances["role"] == "runtime"].itertuples():
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "batch" and e["pid"] == row.instance + 1)
        union, reach = 0, -1
        for a, b in spans:
            union += max(0, b - max(a, reach))
            reach = max(reach, b)
        assert spans and union == us(row.busy_ms)


def test_the_python_api_has_the_trace_only_when_asked():
    assert simulate(load_config(SMALL)).timeline_trace is None
    trace = simulate(load_config([*SMALL, "sim.timeline=true"])).timeline_trace
    assert {"traceEvents", "displayTimeUnit", "otherData"} <= set(trace)
    assert trace["otherData"]["window_us"] == [0, None]


def test_a_sweep_job_writes_its_timeline_only_when_set(tmp_path):
    for flag in ("true", "false"):
        cfg = load_config([*SMALL, f"sim.timeline={flag}"])
        row = execute(Job(0, (), (), 0, None), pickle.dumps(cfg), str(tmp_path / flag))
        assert row["status"] == "ok"
        assert (tmp_path / flag / "0" / "timeline.json").exists() == (flag == "true")


@pytest.mark.parametrize(
    "overrides, key, needle",
    [
        (["sim.timeline_start_s=-1"], "sim.timeline_start_s", ">= 0"),
        (["sim.timeline_start_s=inf"], "sim.timeline_start_s", "finite"),
        (["sim.timeline_end_s=-2"], "sim.timeline_end_s", ">= 0"),
        (["sim.timeline_start_s=5", "sim.timeline_end_s=5"], "sim.timeline_end_s", "after sim.timeline_start_s"),
        (["sim.timeline_start_s=5", "sim.timeline_end_s=2"], "sim.timeline_end_s", "after sim.timeline_start_s"),
        (["sim.timeline_start_s=10", "sim.horizon_s=10"], "sim.timeline_start_s", "end of the run"),
    ],
)
def test_bad_timeline_settings_name_their_key(overrides, key, needle):
    with pytest.raises(ConfigError) as err:
        simulate(load_config([*SMALL, "sim.timeline=true", *overrides]))
    assert err.value.key == key and needle in err.value.message, str(err.value)


def test_a_window_without_the_timeline_warns():
    with pytest.warns(ConfigWarning, match="sim.timeline_end_s: has no effect without sim.timeline=true"):
        result = simulate(load_config([*SMALL, "sim.timeline_end_s=4"]))
    assert result.timeline_trace is None


def test_a_bad_window_on_the_command_line_is_one_line_and_status_2(tmp_path):
    proc = run_module("distsim", "sim.timeline=true", "sim.timeline_end_s=-1", f"hydra.run.dir={tmp_path}")
    assert_user_error(proc, 2, "sim.timeline_end_s", ">= 0")
    assert not (tmp_path / "timeline.json").exists()


def test_the_summary_script_agrees_with_instances_parquet(tmp_path):
    out = run_dir(tmp_path, *PD)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "timeline_summary.py"), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "busy time agrees with instances.parquet on every instance" in proc.stdout
    assert "KV transfer flows: 300" in proc.stdout
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("timeline.json", "requests.parquet", "summary.json"):
        (bad / name).write_bytes((out / name).read_bytes())
    frame = pd.read_parquet(out / "instances.parquet")
    frame.loc[0, "busy_ms"] += 1.0
    frame.to_parquet(bad / "instances.parquet")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "timeline_summary.py"), str(bad)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "DISAGREES" in proc.stdout
