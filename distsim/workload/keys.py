"""Prefix-cache block keys (``Request.block_hashes``): three disjoint ranges of unsigned 64-bit ints.

* trace keys, below 2**61: hashed from a trace's hash-id chain (see :func:`trace_block_keys`);
* prefix-group keys, from 2**61: group g's block i is ``2**61 + g * 2**32 + i``;
* unique keys, from 2**62: a counter, never repeated within one stream.

Equal keys at position k mean equal content up to the end of block k, so every key must stand for its
whole prefix: group keys do because a group's prompt is always at the start; unique keys do trivially;
trace keys hash the chain of ids up to the block.

A request's keys are an ``array('Q')``: 8 bytes a key, where a tuple costs 8 bytes a key plus an int
object of 48 (keys this large take three digits). A request waiting in a queue holds its keys, so in an
overloaded fleet, where most requests wait at once, they are most of the memory; indexing, slicing, ``len``
and ``==`` work as on a tuple.
"""

from __future__ import annotations

from array import array

import numpy as np

GROUP_BASE = 1 << 61
UNIQUE_BASE = 1 << 62
_M64 = (1 << 64) - 1
_STOCK = 1 << 16  # unique keys made at a time


def key_run(start: int, k: int) -> array:
    """The ``k`` consecutive keys from ``start``, packed."""
    return array("Q", np.arange(start, start + k, dtype=np.uint64).tobytes())


class UniqueKeys:
    """Hands out keys no other block in the stream has (content nobody else shares): slices of a stock
    of consecutive keys made ``_STOCK`` at a time, so a request's keys cost one copy, no int objects."""

    def __init__(self):
        self._next = UNIQUE_BASE  # the first key of the stock
        self._stock = array("Q")
        self._used = 0  # keys of the stock handed out

    def take(self, k: int) -> array:
        used = self._used
        if used + k > len(self._stock):
            self._next += used
            self._stock = key_run(self._next, max(k, _STOCK))
            used = 0
        self._used = used + max(k, 0)
        return self._stock[used : used + k]


def group_keys(group: int, blocks: int) -> array:
    """The keys of the first ``blocks`` full blocks of prefix group ``group``'s system prompt."""
    return key_run(GROUP_BASE + (group << 32), blocks)


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


def trace_block_keys(ids, prompt_tokens: int, block_size: int, trace_block: int) -> array:
    """Engine-block keys for a prompt whose ``trace_block``-token blocks carry the ids ``ids``.

    Engine block j ends with token e = (j+1)*block_size - 1, inside trace block t = e // trace_block;
    its key hashes the chain of ids up to t and how far into block t it reaches. So two prompts that
    share their first c ids share exactly the engine blocks that end inside those c trace blocks.
    Only full engine blocks get keys (``prompt_tokens // block_size`` of them).
    """
    n = prompt_tokens // block_size
    if n == 0:
        return array("Q")
    chain = chain_hashes(ids)
    ends = np.arange(1, n + 1, dtype=np.int64) * block_size - 1
    t = ends // trace_block
    reach = (ends - t * trace_block + 1).astype(np.uint64)
    keys = _mix_np(chain[t] ^ (reach * np.uint64(0xD6E8FEB86659FD93))) >> np.uint64(3)
    return array("Q", keys.tobytes())
