"""Pin counts of KV blocks being loaded from a tier (the CPU and storage tiers): a pinned block is neither
evicted nor dropped until every load that reads it has landed."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def unpin(pinned: dict[Hashable, int], hashes: Sequence[Hashable], lo: int, hi: int) -> None:
    """Take one pin off each of ``hashes[lo:hi]`` (a tier's blocks being loaded; the CPU and storage tiers)."""
    for i in range(lo, hi):
        h = hashes[i]
        n = pinned[h] - 1
        if n:
            pinned[h] = n
        else:
            del pinned[h]
