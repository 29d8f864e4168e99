"""Trace replay on the shipped slices: counts, spans and totals read back exactly; options; keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distsim.workload import build_workload

FIX = Path(__file__).parent / "fixtures" / "traces"
CONV = FIX / "mooncake_conversation_head300.jsonl"
SYNTH = FIX / "mooncake_synthetic_head300.jsonl"
AZ_CODE = FIX / "azure_code_head300.csv"
AZ_CONV = FIX / "azure_conv_head300.csv"
BURST = FIX / "burstgpt_format_sample.csv"


def trace(path, fmt, block_size=16, **kw):
    return build_workload(
        {"kind": "trace", "format": fmt, "path": str(path), "num_requests": None, **kw},
        seed=0,
        block_size=block_size,
    )


def mooncake_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("path", [CONV, SYNTH])
def test_mooncake_slice_reads_back_exactly(path):
    rows = mooncake_rows(path)
    src = trace(path, "mooncake")
    reqs = list(src)
    assert len(reqs) == len(rows) == 300
    span_us = (rows[-1]["timestamp"] - rows[0]["timestamp"]) * 1000
    assert reqs[0].arrival_us == 0 and reqs[-1].arrival_us == span_us
    assert [r.arrival_us for r in reqs] == [(x["timestamp"] - rows[0]["timestamp"]) * 1000 for x in rows]
    assert sum(r.prompt_tokens for r in reqs) == sum(x["input_length"] for x in rows)
    assert sum(r.output_tokens for r in reqs) == sum(x["output_length"] for x in rows)
    d = src.describe()
    assert (d["rows"], d["span_s"], d["input_tokens"]) == (
        300,
        span_us / 1e6,
        sum(x["input_length"] for x in rows),
    )
    assert [r.request_id for r in reqs] == list(range(300))


@pytest.mark.parametrize("path", [AZ_CODE, AZ_CONV])
def test_azure_slice_reads_back_exactly(path):
    df = pd.read_csv(path)
    ts = pd.to_datetime(df["TIMESTAMP"])
    expect_us = ((ts - ts.iloc[0]).dt.total_seconds() * 1e6).round().astype(np.int64).tolist()
    reqs = list(trace(path, "azure"))
    assert len(reqs) == len(df) == 300
    assert [r.arrival_us for r in reqs] == expect_us
    assert sum(r.prompt_tokens for r in reqs) == df["ContextTokens"].sum()
    assert sum(r.output_tokens for r in reqs) == df["GeneratedTokens"].sum()
    assert all(r.block_hashes is None for r in reqs)


def test_azure_seven_digit_times_are_exact(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 23:59:59.9999996,10,2\n"
        "2023-11-17 00:00:00.0000005,10,2\n"
        "2023-11-17 00:00:01.5000000,10,2\n"
    )
    # 0.9 us rounds to 1; 1.5000004 s to 1500000 us
    assert [r.arrival_us for r in trace(p, "azure")] == [0, 1, 1_500_000]


def test_burstgpt_skips_and_counts_failures():
    src = trace(BURST, "burstgpt")
    reqs = list(src)
    assert [r.prompt_tokens for r in reqs] == [612, 1480, 233, 57, 1920, 404, 129]
    assert [r.arrival_us for r in reqs] == [s * 1_000_000 for s in (0, 1, 3, 7, 12, 15, 20)]
    assert src.describe()["skipped"] == {"failed (zero response tokens)": 3}


def engine_shared(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.parametrize("bs", [16, 64, 100, 512, 1024])
def test_hash_ids_map_to_engine_blocks(bs):
    rows = mooncake_rows(CONV)[:150]
    reqs = list(trace(CONV, "mooncake", block_size=bs, max_rows=150))
    for r, x in zip(reqs, rows, strict=True):
        assert len(r.block_hashes) == x["input_length"] // bs
        assert all(isinstance(k, int) and 0 <= k < 1 << 61 for k in r.block_hashes)
    pairs = 0
    for i in range(len(rows)):
        for j in range(i):
            ha, hb = rows[i]["hash_ids"], rows[j]["hash_ids"]
            c = engine_shared(ha, hb)
            want = min(c * 512, rows[i]["input_length"], rows[j]["input_length"]) // bs
            assert engine_shared(reqs[i].block_hashes, reqs[j].block_hashes) == want
            pairs += c >= 2
    assert pairs > 0  # the slice has real multi-block sharing


def test_equal_hash_ids_give_equal_keys_across_files(tmp_path):
    p = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]},
        {"timestamp": 5, "input_length": 1030, "output_length": 5, "hash_ids": [7, 8, 10]},
        {"timestamp": 9, "input_length": 600, "output_length": 5, "hash_ids": [8, 11]},  # 8 at a new position
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    a, b, c = (r.block_hashes for r in trace(p, "mooncake"))
    assert engine_shared(a, b) == 64  # two full 512-token blocks at block size 16
    assert engine_shared(a, c) == 0  # same id, different chain: different content


def test_window_max_rows_and_time_scale():
    rows = mooncake_rows(CONV)
    t0 = rows[0]["timestamp"]
    sel = [x for x in rows if 30_000 <= x["timestamp"] - t0 < 60_000]
    reqs = list(trace(CONV, "mooncake", start_s=30.0, end_s=60.0))
    assert len(reqs) == len(sel)
    assert [r.arrival_us for r in reqs] == [(x["timestamp"] - sel[0]["timestamp"]) * 1000 for x in sel]
    assert len(list(trace(CONV, "mooncake", start_s=30.0, max_rows=7))) == 7
    half = list(trace(CONV, "mooncake", time_scale=0.5))
    assert [r.arrival_us for r in half] == [(x["timestamp"] - t0) * 500 for x in rows]


def test_target_rate_rescales_the_mean_rate():
    reqs = list(trace(AZ_CONV, "azure", target_rate_rps=50.0))
    span_s = (reqs[-1].arrival_us - reqs[0].arrival_us) / 1e6
    assert (len(reqs) - 1) / span_s == pytest.approx(50.0, rel=1e-5)
    orig = list(trace(AZ_CONV, "azure"))
    ratio = np.array([r.arrival_us for r in reqs[1:]]) / np.array([r.arrival_us for r in orig[1:]])
    assert np.allclose(ratio, ratio[0], rtol=1e-4)  # one common factor


def test_count_and_duration_limits_on_traces():
    assert len(list(trace(CONV, "mooncake", num_requests=25))) == 25
    reqs = list(trace(CONV, "mooncake", duration_s=30.0))
    assert reqs[-1].arrival_us <= 30_000_000 and len(reqs) < 300


def test_jitter_spreads_ticks_and_keeps_order():
    rows = mooncake_rows(CONV)
    t0 = rows[0]["timestamp"]
    a = list(trace(CONV, "mooncake", jitter_s=3.0))
    b = list(trace(CONV, "mooncake", jitter_s=3.0))
    assert [(r.arrival_us, r.prompt_tokens) for r in a] == [(r.arrival_us, r.prompt_tokens) for r in b]
    assert all(x.arrival_us <= y.arrival_us for x, y in zip(a, a[1:], strict=False))
    assert [r.request_id for r in a] == list(range(300))
    assert len({r.arrival_us for r in a}) > 290  # ticks of ~10 requests are spread out
    base = sorted((x["timestamp"] - t0) * 1000 for x in rows)
    got = sorted(r.arrival_us for r in a)
    assert sorted(r.prompt_tokens for r in a) == sorted(x["input_length"] for x in rows)
    assert all(0 <= g - b_ <= 3_000_000 for g, b_ in zip(got, base, strict=True))  # order statistics


def write_table(tmp_path, fmt):
    df = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.25, 0.5, 1.75, 2.0, 2.5],
            "input_tokens": [100, 200, 100 + 30 + 50, 40, 300 + 60, 10],
            "output_tokens": [30, 60, 7, 9, 11, 5],
            "tenant": [0, 1, 0, 2, 1, None],
            "session": [5, 6, 5, None, 6, None],
            "prefix_group": [1, None, None, 0, None, 1],
        }
    )
    if fmt == "csv":
        p = tmp_path / "t.csv"
        df.to_csv(p, index=False)
    else:
        p = tmp_path / "t.parquet"
        df.astype({"tenant": "Int64", "session": "Int64", "prefix_group": "Int64"}).to_parquet(p)
    return p


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_own_table_format(tmp_path, fmt):
    p = write_table(tmp_path, fmt)
    reqs = list(trace(p, fmt, prefix={"groups": 2, "tokens": 48, "share": 0.0}, tenants={"count": 3}))
    assert [r.arrival_us for r in reqs] == [0, 250_000, 500_000, 1_750_000, 2_000_000, 2_500_000]
    assert [r.tenant for r in reqs] == [0, 1, 0, 2, 1, 0]
    assert [r.session_id for r in reqs] == [5, 6, 5, -1, 6, -1]
    r0, r1, r2, r3, r4, r5 = reqs
    assert r2.block_hashes[: len(r0.block_hashes)] == r0.block_hashes  # turn 2 extends turn 1
    assert r4.block_hashes[: len(r1.block_hashes)] == r1.block_hashes
    assert engine_shared(r0.block_hashes, r3.block_hashes) == 0  # different groups
    assert r5.block_hashes is not None and not r5.block_hashes  # 10 tokens of group 1's prompt: no full block
    assert r0.block_hashes[:3] != r3.block_hashes[:3]
    assert len(r0.block_hashes) == 100 // 16


def test_trace_source_streams_again_identically():
    src = trace(SYNTH, "mooncake")
    a = [(r.arrival_us, r.prompt_tokens, r.block_hashes) for r in src]
    b = [(r.arrival_us, r.prompt_tokens, r.block_hashes) for r in src]
    assert a == b
