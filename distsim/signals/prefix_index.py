"""The router's own prefix index: which prompt blocks it has sent to which instance, kept by segments.

Real prefix-aware routers (llm-d's precise and approximate scorers, SGLang's router) keep such an
index instead of asking instances: per instance a bounded LRU of block hashes, updated as requests
are routed. Like llm-d's approximate prefix scorer (64-token chunks), the index keeps one key per
``stride`` engine blocks: block hashes are chained, so the key of every stride-th block stands for the
whole prefix up to it, and a match is exact to within one chunk at a fraction of the work.

Its answers are exactly those of a per-key index (kept as tests/prefixref.py and compared after every
operation by tests/test_prefix_index_segments.py): per instance an LRU of keys where recording a request
moves its keys, head first, to the newest end, and the oldest keys go when the instance holds more than
its capacity. That order is kept by *runs*: the keys one request recorded, less those a later request
recorded again and those evicted, are a contiguous stretch of the LRU order and a contiguous stretch of
one prompt (a later request takes back a head of it, the prompts it shares being prefixes; eviction
takes its head, the oldest keys). So an instance's LRU is a list of runs, each named by its last node in
the shared tree (distsim/signals/prefix_tree.py, which never moves a node's end) and the depth it starts
at, and found from a request's path by its first key. Recording, evicting and forgetting cost the nodes
and runs they touch, not the keys. No order differs from the per-key index's: the runs are that order,
cut where it has to be, so the same keys are held and evicted in the same order after every call.

Each tree node carries the bitmask of the instances holding it, so the longest-prefix match of a request
against every instance is one walk down its nodes intersecting masks, then a few vectorised unpacks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from distsim.instance.kv_cache import matched
from distsim.signals.prefix_tree import KeyTree, Node

UNPACKED_BYTES = 4 << 20  # the masks' 0/1 vectors the index keeps, in bytes (a few hundred on 1,000 instances)
FEW_MASKS = 4  # a match over at most this many sets of holders sums their vectors (more: one matrix product)


class Run:
    """Keys from ``start`` keys deep down to the end of node ``end``, first key ``key``; in its instance's
    LRU list between ``prev`` (older) and ``next`` (newer)."""

    __slots__ = ("end", "start", "key", "prev", "next")

    def __init__(self, end: Node | None, start: int, key: Hashable):
        self.end = end
        self.start = start
        self.key = key
        self.prev: Run = self
        self.next: Run = self


class PrefixIndex:
    def __init__(self, num_instances: int, capacity_blocks: Sequence[int], stride: int = 1):
        self.n = num_instances
        self.stride = stride
        self.capacity = [max(1, c // stride) for c in capacity_blocks]  # in keys
        self.tree = KeyTree()
        self.size = [0] * num_instances  # keys each instance holds
        self._lru = [Run(None, 0, None) for _ in range(num_instances)]  # sentinels: next the oldest run
        self._starts: list[dict[Hashable, Run]] = [{} for _ in range(num_instances)]  # first key -> run
        # one int object per instance for a single owner's mask: on a large fleet most nodes have one
        # owner, and a fresh 1,000-bit int per node would cost 160 bytes each
        self._bit = [1 << i for i in range(num_instances)]
        self._nbytes = (num_instances + 7) // 8
        self._unpacked: dict[int, np.ndarray] = {}  # mask -> its 0/1 vector (see _holders)

    def record(self, instance: int, hashes: Sequence[Hashable]) -> None:
        """The blocks of a request routed to ``instance`` become (most recently) its."""
        keys = hashes[self.stride - 1 :: self.stride] if self.stride > 1 else hashes
        if not keys:
            return
        path = self.tree.path(keys)
        held = self._take_back(instance, path)
        bit = self._bit[instance]
        for node in path:
            mask = node.mask
            if not mask & bit:
                node.mask = mask | bit if mask else bit
        run = Run(path[-1], 0, keys[0])
        path[0].heads += 1
        for node in path[:-1]:  # a split an eviction left heals once the holders agree again
            self.tree.merge(node)
        lru = self._lru[instance]
        last = lru.prev
        run.prev, run.next = last, lru
        last.next = lru.prev = run
        self._starts[instance][keys[0]] = run
        size = self.size[instance] + len(keys) - held
        self.size[instance] = size
        if size > self.capacity[instance]:
            self._evict(instance, size - self.capacity[instance])

    def forget(self, instance: int) -> None:
        """``instance`` holds nothing any more (an autoscaled replica that left: a new one starts cold)."""
        lru = self._lru[instance]
        run = lru.next
        while run is not lru:
            self._disown(instance, run.end, run.start)
            run = run.next
        lru.prev = lru.next = lru
        self._starts[instance] = {}
        self.size[instance] = 0

    def match(self, hashes: Sequence[Hashable] | None) -> np.ndarray:
        """Blocks of ``hashes`` each instance holds as a prefix (int64 array, one per instance)."""
        if hashes and self.stride > 1:
            hashes = hashes[self.stride - 1 :: self.stride]
        if not hashes:
            return np.zeros(self.n, dtype=np.int64)
        masks, runs = self._walk(hashes)
        if not masks:
            return np.zeros(self.n, dtype=np.int64)
        # one unpack for every run's mask: a (runs x instances) 0/1 matrix, weighted by the run lengths
        nbytes = self._nbytes
        if len(masks) <= FEW_MASKS:  # the common case (a few sets of holders): no matrix, a multiply each
            lengths = self._holders(masks[0]) * runs[0]
            for mask, run in zip(masks[1:], runs[1:]):
                lengths += self._holders(mask) * run
        else:
            raw = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in masks), dtype=np.uint8)
            bits = np.unpackbits(raw.reshape(len(masks), nbytes), axis=1, bitorder="little")[:, : self.n]
            lengths = np.asarray(runs, dtype=np.int64) @ bits
        return lengths * self.stride if self.stride > 1 else lengths

    def _holders(self, mask: int) -> np.ndarray:
        """``mask`` as a 0/1 int64 vector over the instances (read-only). A shared prompt is matched again
        and again between changes of its holders, so recent masks' vectors are kept (up to UNPACKED_BYTES)."""
        bits = self._unpacked.get(mask)
        if bits is None:
            if len(self._unpacked) * self.n * 8 >= UNPACKED_BYTES:
                self._unpacked.clear()
            raw = np.frombuffer(mask.to_bytes(self._nbytes, "little"), dtype=np.uint8)
            bits = self._unpacked[mask] = np.unpackbits(raw, bitorder="little")[: self.n].astype(np.int64)
        return bits

    def keys(self, instance: int) -> list[Hashable]:
        """The keys ``instance`` holds, least recent first (the per-key index's LRU order; for the tests)."""
        out: list[Hashable] = []
        lru = self._lru[instance]
        run = lru.next
        while run is not lru:
            parts = []
            node = run.end
            while node.depth > run.start:
                skip = max(0, run.start - (node.depth - node.n))
                parts.append(node.src[node.off + skip : node.off + node.n])
                node = node.parent
            out.extend(k for part in reversed(parts) for k in part)
            run = run.next
        return out

    # -- the walks ---------------------------------------------------------------------------------
    def _walk(self, keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
        """Down the tree along ``keys`` while the set of instances holding the whole prefix shrinks:
        (mask, keys held) runs."""
        masks: list[int] = []
        runs: list[int] = []
        node = self.tree.root
        mask = -1  # every instance, before the first key
        run = d = 0
        end = len(keys)
        while d < end:
            child = node.children.get(keys[d])
            if child is None:
                break
            nxt = mask & child.mask
            if not nxt:
                break
            m = matched(child, keys, d, end)
            if nxt != mask:
                if run:
                    masks.append(mask)
                    runs.append(run)
                mask = nxt
                run = 0
            run += m
            if m < child.n:
                break
            node = child
            d += m
        if run:
            masks.append(mask)
            runs.append(run)
        return masks, runs

    def _take_back(self, instance: int, path: list[Node]) -> int:
        """Take the keys of ``path`` out of the runs of ``instance`` that hold them (each a head of its
        run, from a node where it starts); returns how many keys it held."""
        bit = self._bit[instance]
        starts = self._starts[instance]
        held = 0
        run = last = None
        for node in path:
            if node.mask & bit:
                held += node.n
                first = starts.get(node.src[node.off])
                if first is not None:  # a run starts here; else the node goes on the run above it
                    node.heads -= 1
                    if run is not None:
                        self._cut(instance, run, last)
                    run = first
            elif run is not None:
                self._cut(instance, run, last)
                run = None
            last = node
        if run is not None:
            self._cut(instance, run, last)
        return held

    def _cut(self, instance: int, run: Run, last: Node) -> None:
        """``run`` loses its keys down to the end of ``last``: it goes, or starts below ``last``."""
        starts = self._starts[instance]
        del starts[run.key]
        if run.end is last:
            run.prev.next = run.next
            run.next.prev = run.prev
            return
        node = run.end
        while node.parent is not last:
            node = node.parent
        node.heads += 1
        run.start = last.depth
        run.key = node.src[node.off]
        starts[run.key] = run

    def _evict(self, instance: int, excess: int) -> None:
        """Take the ``excess`` oldest keys of ``instance``: whole runs, oldest first, then the head of one."""
        lru = self._lru[instance]
        starts = self._starts[instance]
        self.size[instance] -= excess
        while excess:
            run = lru.next
            n = run.end.depth - run.start
            if n <= excess:
                excess -= n
                lru.next = run.next
                run.next.prev = lru
                del starts[run.key]
                self._disown(instance, run.end, run.start)
                continue
            node = self.tree.starting_at(run.end, run.start + excess)
            node.heads += 1
            del starts[run.key]
            self._disown(instance, node.parent, run.start)
            run.start += excess
            run.key = node.src[node.off]
            starts[run.key] = run
            excess = 0

    def _disown(self, instance: int, node: Node, start: int) -> None:
        """``instance`` no longer holds the keys of a run (or its head) from ``start`` keys deep down to the
        end of ``node``; nodes left with neither owners nor children go, holes above them included."""
        bit = self._bit[instance]
        one = self._bit
        bottom = top = node
        while node.depth > start:
            rest = node.mask & ~bit
            if rest & (rest - 1) == 0 and rest:  # one owner left: its shared mask object
                rest = one[rest.bit_length() - 1]
            node.mask = rest
            top = node
            node = node.parent
        top.heads -= 1  # where the run started
        self.tree.prune(bottom)
