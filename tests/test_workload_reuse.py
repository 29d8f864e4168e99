"""The trace's own prefix-reuse bound (infinite cache, longest already-seen prefix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distsim.workload import build_workload
from distsim.workload.traces.reuse import block_reuse, hash_id_reuse

FIX = Path(__file__).parent / "fixtures" / "traces"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mooncake"


def brute_force(path) -> float:
    """Longest prefix of ids equal to a prefix of any earlier request, without assuming id chains."""
    seen: set = set()
    total = reused = 0
    for line in path.read_text().splitlines():
        x = json.loads(line)
        ids = tuple(x["hash_ids"])
        k = max((k for k in range(len(ids) + 1) if ids[:k] in seen), default=0)
        total += x["input_length"]
        reused += min(k * 512, x["input_length"])
        seen.update(ids[:k] for k in range(len(ids) + 1))
    return reused / total


@pytest.mark.parametrize("name", ["mooncake_conversation_head300.jsonl", "mooncake_synthetic_head300.jsonl"])
def test_reuse_bound_on_slices(name):
    path = FIX / name
    h = hash_id_reuse(path)
    assert h.fraction == pytest.approx(brute_force(path), abs=1e-12)
    assert 0.0 < h.fraction < 1.0
    for bs in (16, 128):
        src = build_workload(
            {"kind": "trace", "format": "mooncake", "path": str(path), "num_requests": None},
            seed=0,
            block_size=bs,
        )
        b = block_reuse(src, bs)
        assert b.prompt_tokens == h.prompt_tokens
        # engine blocks can only lose the partial tail of a 512-token block: never above, and close
        assert b.reused_tokens <= h.reused_tokens
        assert h.fraction - b.fraction < 0.01


@pytest.mark.skipif(not (DATA / "conversation_trace.jsonl").exists(), reason="full traces not available")
@pytest.mark.parametrize("name, want", [("conversation_trace.jsonl", 0.37), ("synthetic_trace.jsonl", 0.65)])
def test_reuse_bound_of_full_traces(name, want):
    assert hash_id_reuse(DATA / name).fraction == pytest.approx(want, abs=0.005)
