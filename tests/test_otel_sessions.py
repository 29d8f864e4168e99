"""OpenTelemetry GenAI spans into a session trace (distsim.workload.traces.otel), and a session trace
replayed closed-loop: each turn its recorded wait after the previous reply, with its recorded lengths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.errors import InputFileError
from distsim.workload.traces import otel

FIXTURE = Path(__file__).parent / "fixtures/traces/otel_genai_agent.jsonl"
REPLAY = ["workload.kind=trace", "workload.format=csv", "workload.num_requests=null", "cluster.instances=1",
          "workload.sessions.enabled=true", "workload.sessions.closed_loop=true"]


def test_spans_become_one_row_per_inference_call(tmp_path):
    out = tmp_path / "sessions.csv"
    assert otel.convert(FIXTURE, out) == 5
    lines = out.read_text().splitlines()
    assert lines[0] == "arrival_s,input_tokens,output_tokens,session,wait_s,tool_calls"
    assert lines[1:] == [
        "0.000000,1800,120,0,,",  # conv-a's first call (the invoke_agent span is left out)
        "2.450000,2600,310,0,1.250000,2",  # after two parallel tool calls: 1.25 s from the reply to this call
        "3.000000,400,60,1,,",  # a trace without gen_ai.conversation.id is its own session
        "3.750000,520,90,1,0.150000,1",
        "7.000000,2990,420,0,3.000000,0",  # a user's think time, no tool call
    ]


def test_a_session_trace_replays_closed_loop(tmp_path):
    out = tmp_path / "sessions.csv"
    otel.convert(FIXTURE, out)
    r = simulate(load_config([*REPLAY, f"workload.path={out}"]))
    df = r.requests.sort_values(["session_id", "turn"])
    assert df["input_tokens"].tolist() == [1800, 2600, 2990, 400, 520]  # as recorded, by session
    waits = {(0, 1): 1250.0, (0, 2): 3000.0, (1, 1): 150.0}
    by = {(s, t): row for s, t, row in zip(df["session_id"], df["turn"], df.itertuples(), strict=True)}
    for (s, t), wait_ms in waits.items():
        assert by[(s, t)].arrival_ms == pytest.approx(by[(s, t - 1)].completion_ms + wait_ms, abs=0.0011)
    assert by[(0, 0)].arrival_ms == 0.0 and by[(1, 0)].arrival_ms == 3000.0  # sessions start at their times
    assert r.summary["sessions"]["tool_calls"] == 3 and r.summary["sessions"]["finished"] == 2
    assert (df.loc[df["turn"] > 0, "cached_tokens"] > 0).all()  # each call resends the conversation so far


def test_spans_without_usage_name_the_span(tmp_path):
    data = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    span = data[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    span["attributes"] = [a for a in span["attributes"] if a["key"] != "gen_ai.usage.output_tokens"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(d) for d in data) + "\n")
    with pytest.raises(InputFileError, match=r"line 1, span 02 .*without gen_ai.usage.output_tokens"):
        otel.read_spans(bad)


def test_not_otlp_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"spans": []}\n')
    assert otel.main([str(bad), str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert "resourceSpans" in err and err.count("\n") == 1


def test_a_negative_wait_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens,session,wait_s\n0,100,10,0,\n1,200,10,0,-1\n")
    with pytest.raises(InputFileError, match=r"t.csv:3: wait_s must be >= 0"):
        simulate(load_config([*REPLAY, f"workload.path={trace}"]))


def test_rows_without_a_session_are_sessions_of_one(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,200,10\n")
    df = simulate(load_config([*REPLAY, f"workload.path={trace}"])).requests
    assert df["arrival_ms"].tolist() == [0.0, 500.0] and df["session_id"].tolist() == [0, 1]
    assert np.all(df["turn"] == 0)
