"""Prefix-cache block keys (``Request.block_hashes``): three disjoint ranges of Python ints.

* trace keys, below 2**61: hashed from a trace's hash-id chain (see :func:`trace_block_keys`);
* prefix-group keys, from 2**61: group g's block i is ``2**61 + g * 2**32 + i``;
* unique keys, from 2**62: a counter, never repeated within one stream.

Equal keys at position k mean equal content up to the end of block k, so every key must stand for its
whole prefix: group keys do because a group's prompt is always at the start; unique keys do trivially;
trace keys hash the chain of ids up to the block.
"""

from __future__ import annotations

import numpy as np

GROUP_BASE = 1 << 61
UNIQUE_BASE = 1 << 62
_M64 = (1 << 64) - 1


class UniqueKeys:
    """Hands out keys no other block in the stream has (content nobody else shares)."""

    def __init__(self):
        self._next = UNIQUE_BASE

    def take(self, k: int) -> tuple:
        start = self._next
        self._next += k
        return tuple(range(start, start + k))


def group_keys(group: int, blocks: int) -> tuple:
    """The keys of the first ``blocks`` full blocks of prefix group ``group``'s system prompt."""
    base = GROUP_BASE + (group << 32)
    return tuple(range(base, base + blocks))


def _mix(x: int) -> int:
    """A 64-bit bijective mixer (SplitMix64's finaliser): stable across runs, unlike ``hash()``."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix_np(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def chain_hashes(ids) -> np.ndarray:
    """Hash of each prefix of ``ids`` (c_t covers ids[0..t]), as uint64."""
    out = np.empty(len(ids), dtype=np.uint64)
    c = 0x6A09E667F3BCC908
    for t, h in enumerate(ids):
        c = _mix((c * 0x9E3779B97F4A7C15 + h + 1) & _M64)
        out[t] = c
    return out


def trace_block_keys(ids, prompt_tokens: int, block_size: int, trace_block: int) -> tuple:
    """Engine-block keys for a prompt whose ``trace_block``-token blocks carry the ids ``ids``.

    Engine block j ends with token e = (j+1)*block_size - 1, inside trace block t = e // trace_block;
    its key hashes the chain of ids up to t and how far into block t it reaches. So two prompts that
    share their first c ids share exactly the engine blocks that end inside those c trace blocks.
    Only full engine blocks get keys (``prompt_tokens // block_size`` of them).
    """
    n = prompt_tokens // block_size
    if n == 0:
        return ()
    chain = chain_hashes(ids)
    ends = np.arange(1, n + 1, dtype=np.int64) * block_size - 1
    t = ends // trace_block
    reach = (ends - t * trace_block + 1).astype(np.uint64)
    keys = _mix_np(chain[t] ^ (reach * np.uint64(0xD6E8FEB86659FD93))) >> np.uint64(3)
    return tuple(keys.tolist())
