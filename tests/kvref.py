"""Block KV cache with prefix caching, vLLM V1 style, counted rather than materialised.

A block is either free (holds nothing), private to one request (its decode tail, a duplicate, or any
block of a request without content hashes), or cached under a content hash. Cached blocks carry a
reference count; at zero they stay in the cache as *evictable*, kept in LRU order, until an allocation
needs the space. Allocation takes free blocks first and evicts the least recently freed cached blocks
only when the free ones run out (SGLang and vLLM both keep hot prefixes this way; vLLM's single free
queue may evict a cached block earlier, while never-used blocks remain).

Because private blocks are interchangeable they are only counted: the instance knows how many each
request holds. The invariant ``free + evictable + referenced + sum(private) == total`` (INV-2 in
docs/invariants.md) is checked by :meth:`Instance.check_invariants` in the tests after every event.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from lruset import LruSet


class KVCache:
    __slots__ = ("total", "free", "refcount", "evictable", "evictions", "_evictable_members")

    def __init__(self, total_blocks: int):
        self.total = total_blocks
        self.free = total_blocks
        self.refcount: dict[Hashable, int] = {}  # cached and referenced: hash -> holders
        self.evictable = LruSet()  # cached, unreferenced, LRU first (half an OrderedDict's memory)
        self._evictable_members = self.evictable.members  # len() of it without a method call (hot)
        self.evictions = 0

    # -- queries -------------------------------------------------------------------------------
    def available(self) -> int:
        """Blocks an allocation could get now (free plus evictable)."""
        return self.free + len(self._evictable_members)

    def used(self) -> int:
        """Blocks held by running requests (referenced cached plus private)."""
        return self.total - self.free - len(self._evictable_members)

    def match_prefix(self, hashes: Sequence[Hashable], limit: int) -> tuple[int, int]:
        """Length of the longest cached prefix of ``hashes[:limit]`` and how many of those blocks are
        currently evictable (referencing them takes them out of the evictable pool)."""
        refcount = self.refcount
        evictable = self._evictable_members
        hits = 0
        from_evictable = 0
        for i in range(min(limit, len(hashes))):
            h = hashes[i]
            if h in refcount:
                hits += 1
            elif h in evictable:
                hits += 1
                from_evictable += 1
            else:
                break
        return hits, from_evictable

    # -- changes -------------------------------------------------------------------------------
    def reference(self, hashes: Sequence[Hashable]) -> None:
        """Take a reference on cached blocks (a prefix hit)."""
        refcount = self.refcount
        evictable = self.evictable
        for h in hashes:
            n = refcount.get(h)
            if n is None:
                evictable.remove(h)
                refcount[h] = 1
            else:
                refcount[h] = n + 1

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks, evicting LRU cached blocks when free ones run out. The caller has checked
        ``available() >= n``."""
        if n <= self.free:
            self.free -= n
            return
        evict = n - self.free
        self.free = 0
        pop_oldest = self.evictable.pop_oldest
        for _ in range(evict):
            pop_oldest()
        self.evictions += evict

    def register(self, hashes: Sequence[Hashable], shared: list) -> int:
        """Cache freshly computed full blocks under their hashes, held by the computing request: each
        newly cached hash is appended to ``shared``; content already cached stays private (a duplicate).
        Returns how many blocks moved from private to cached. One call per prefill chunk."""
        refcount = self.refcount
        evictable = self._evictable_members
        before = len(shared)
        for h in hashes:
            if h not in refcount and h not in evictable:
                refcount[h] = 1
                shared.append(h)
        return len(shared) - before

    def release(self, shared: Sequence[Hashable], private: int) -> None:
        """Drop a request's blocks. Shared blocks are released last-first, so the tail of a prompt is
        evicted before its head (the head is what other requests share)."""
        refcount = self.refcount
        evictable = self.evictable
        for i in range(len(shared) - 1, -1, -1):
            h = shared[i]
            n = refcount[h] - 1
            if n:
                refcount[h] = n
            else:
                del refcount[h]
                evictable.add(h)
        self.free += private
