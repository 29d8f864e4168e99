"""The router's prefix index as it was before segments: one LRU entry and one owners-dict entry per key.

Kept as the reference that tests/test_prefix_index_segments.py compares distsim/signals/prefix_index.py
against (the same answers after every operation). Per instance a bounded LRU of block keys (every
``stride``-th chained hash), each key mapped to a bitmask of the instances holding it; a match walks the
request's keys intersecting masks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from lruset import LruSet


class PrefixIndex:
    def __init__(self, num_instances: int, capacity_blocks: Sequence[int], stride: int = 1):
        self.n = num_instances
        self.stride = stride
        self.capacity = [max(1, c // stride) for c in capacity_blocks]  # in keys
        self.owners: dict[Hashable, int] = {}  # hash -> bitmask of instances
        self.lru = [LruSet() for _ in range(num_instances)]
        # one int object per instance for a single owner's mask: on a large fleet most keys have one
        # owner, and a fresh 1,000-bit int per key would cost 160 bytes each
        self._bit = [1 << i for i in range(num_instances)]
        self._nbytes = (num_instances + 7) // 8

    def record(self, instance: int, hashes: Sequence[Hashable]) -> None:
        """The blocks of a request routed to ``instance`` become (most recently) its."""
        if self.stride > 1:
            hashes = hashes[self.stride - 1 :: self.stride]
        lru = self.lru[instance]
        members = lru.members
        owners = self.owners
        bit = self._bit[instance]
        cap = self.capacity[instance]
        for h in hashes:
            if h in members:
                lru.touch(h)
                continue
            lru.add(h)
            mask = owners.get(h)
            owners[h] = bit if mask is None else mask | bit
            if len(members) > cap:
                old = lru.pop_oldest()
                mask = owners[old] & ~bit
                if not mask:
                    del owners[old]
                elif mask & (mask - 1) == 0:  # one owner left: its shared mask object
                    owners[old] = self._bit[mask.bit_length() - 1]
                else:
                    owners[old] = mask

    def forget(self, instance: int) -> None:
        """``instance`` holds nothing any more (an autoscaled replica that left: a new one starts cold)."""
        bit = self._bit[instance]
        owners = self.owners
        for h in list(self.lru[instance]):
            rest = owners[h] & ~bit
            if rest:  # a single owner left gets its shared mask object, as in record
                owners[h] = rest if rest & (rest - 1) else self._bit[rest.bit_length() - 1]
            else:
                del owners[h]
        self.lru[instance] = LruSet()

    def match(self, hashes: Sequence[Hashable] | None) -> np.ndarray:
        """Blocks of ``hashes`` each instance holds as a prefix (int64 array, one per instance)."""
        if hashes and self.stride > 1:
            hashes = hashes[self.stride - 1 :: self.stride]
        if not hashes:
            return np.zeros(self.n, dtype=np.int64)
        # walk the keys while the set of instances holding the whole prefix shrinks: (mask, keys held) runs
        owners = self.owners
        masks: list[int] = []
        runs: list[int] = []
        mask = owners.get(hashes[0], 0)
        run = 0
        for h in hashes:
            nxt = mask & owners.get(h, 0)
            if nxt != mask:
                if run:
                    masks.append(mask)
                    runs.append(run)
                run = 0
                mask = nxt
                if not mask:
                    break
            run += 1
        if mask and run:
            masks.append(mask)
            runs.append(run)
        if not masks:
            return np.zeros(self.n, dtype=np.int64)
        # one unpack for every run's mask: a (runs x instances) 0/1 matrix, weighted by the run lengths
        nbytes = self._nbytes
        raw = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in masks), dtype=np.uint8)
        bits = np.unpackbits(raw.reshape(len(masks), nbytes), axis=1, bitorder="little")[:, : self.n]
        lengths = np.asarray(runs, dtype=np.int64) @ bits
        return lengths * self.stride if self.stride > 1 else lengths
