"""Block KV cache with prefix caching, vLLM V1 style, counted rather than materialised, kept by segments.

A block is either free (holds nothing), private to one request (its decode tail, a duplicate, or any
block of a request without content hashes), or cached under a content hash. Cached blocks carry a
reference count; at zero they stay in the cache as *evictable*, kept in LRU order, until an allocation
needs the space. Allocation takes free blocks first and evicts the least recently freed cached blocks
only when the free ones run out (SGLang and vLLM both keep hot prefixes this way; vLLM's single free
queue may evict a cached block earlier, while never-used blocks remain).

Cached blocks are kept by *segments*: a node of a prefix tree holds a run of consecutive blocks of one
prompt that are cached, referenced and released together (a shared system prompt, a session's earlier
turns, a request's own prompt), with one reference count and one place in the LRU list. Nodes split
where a request diverges inside a run, takes a reference on part of one, or eviction takes part of one;
so reference, register, release and match cost O(nodes touched), not O(blocks). A block key stands for
its whole prefix (distsim.workload.keys): two equal keys at a depth mean equal runs up to it, so a node
matches a request up to the last equal key, found by comparing the run's last key (then bisecting).

The order of eviction is exactly that of a per-block LRU (tests/kvref.py, the property test in
tests/test_kv_segments.py): a request releases its blocks last-first in one call, so a node's blocks
enter the LRU together, tail first, and the node stands for a contiguous stretch of the per-block order;
a node split while evictable puts its head right after its tail. Eviction takes the oldest node from
its tail. A node whose blocks are all evicted while deeper nodes stay cached (a request that held only a
later part of a prompt, its head being duplicates of another's) stays in the tree as a *hole*: no
blocks, not matched, refilled when someone registers the run again.

A node keeps its own keys (a copy of a slice of the prompt's, not the prompt's whole tuple, which would
outlive the request), packed 8 bytes a key (``array('Q')``) when they are unsigned 64-bit ints, as every
workload's are (distsim.workload.keys): a tuple would keep each key's int object alive, 48 bytes a cached
block in all, the largest part of a big fleet's memory. A request's references are a flat list ``[node, blocks, node, blocks, ...]`` of runs in prompt order,
each the deepest node of a stretch of consecutive held blocks and its length (a node split later keeps
the tail in the same object, so the deepest node stays valid). Because private blocks are
interchangeable they are only counted: the instance knows how many each request holds. The invariant
``free + evictable + referenced + sum(private) == total`` (INV-2 in docs/invariants.md) is checked by
:meth:`Instance.check_invariants` in the tests after every event.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence

_LEAF: dict[Hashable, Node] = {}  # a leaf's children (shared, never written: a first child gets a new dict)


class Node:
    """A run of ``n`` cached blocks whose keys are ``src[off : off + n]``, child of ``parent``."""

    __slots__ = ("parent", "children", "src", "off", "n", "ref", "present", "prev", "next")

    def __init__(self, parent: Node | None, src: Sequence[Hashable], off: int, n: int, ref: int, present: bool):
        self.parent: Node = parent or self  # the root is its own parent (never followed)
        self.children = _LEAF
        self.src = src
        self.off = off
        self.n = n
        self.ref = ref
        self.present = present  # False: a hole (evicted, kept for the cached nodes below it)
        # LRU neighbours while evictable (present, ref 0); else None, never the node itself: a node out of
        # the tree is then in no reference cycle and is freed at once, not at the next full collection
        self.prev: Node | None = None
        self.next: Node | None = None


def _packed(keys: Sequence[Hashable]) -> Sequence[Hashable]:
    """A node's own copy of ``keys``: packed as unsigned 64-bit ints when they all are, else a tuple."""
    try:
        return array("Q", keys)
    except (TypeError, OverflowError):
        return tuple(keys)


def _grown(node: Node, keys: Sequence[Hashable]) -> None:
    """Append ``keys`` to ``node``'s run: in place when the node owns its whole key array (no split head
    shares it: a split leaves the tail with an offset), else into a fresh copy."""
    src, off, n = node.src, node.off, node.n
    more = _packed(keys)
    if type(src) is array and type(more) is array:
        if off == 0 and n == len(src):
            src.extend(more)
        else:
            node.src = src[off : off + n] + more
    else:
        node.src = tuple(src[off : off + n]) + tuple(more)
    node.off = 0
    node.n = n + len(more)


def _cut(src: Sequence[Hashable], end: int) -> None:
    """Free the keys of a packed run from ``end`` on: evicted, and no node needs them (the nodes that
    share a run are a chain of split heads above its last owner, each keeping keys before the next's)."""
    if type(src) is array and len(src) > end:
        del src[end:]


def matched(node: Node, hashes: Sequence[Hashable], d: int, end: int) -> int:
    """How many leading blocks of ``node`` equal ``hashes[d:end]`` (the first is known to)."""
    k = node.n if node.n < end - d else end - d
    src, off = node.src, node.off
    if hashes[d + k - 1] == src[off + k - 1]:
        return k
    lo, hi = 1, k - 1  # hashes[d+lo-1] matches, hashes[d+hi] does not; keys stand for their prefix
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if hashes[d + mid - 1] == src[off + mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class KVCache:
    __slots__ = ("total", "free", "evictable", "referenced", "references", "evictions", "root", "_lru")

    def __init__(self, total_blocks: int):
        self.total = total_blocks
        self.free = total_blocks
        self.evictable = 0  # cached blocks nobody references
        self.referenced = 0  # cached blocks somebody references
        self.references = 0  # references held on cached blocks (a block held twice counts twice)
        self.evictions = 0
        self.root = Node(None, (), 0, 0, 1, True)
        self._lru = lru = Node(None, (), 0, 0, 0, False)  # sentinel: next is the oldest, prev the newest
        lru.prev = lru.next = lru

    # -- queries -------------------------------------------------------------------------------
    def available(self) -> int:
        """Blocks an allocation could get now (free plus evictable)."""
        return self.free + self.evictable

    def used(self) -> int:
        """Blocks held by running requests (referenced cached plus private)."""
        return self.total - self.free - self.evictable

    def match_prefix(self, hashes: Sequence[Hashable], limit: int) -> tuple[int, int]:
        """Length of the longest cached prefix of ``hashes[:limit]`` and how many of those blocks are
        currently evictable (referencing them takes them out of the evictable pool)."""
        end = min(limit, len(hashes))
        node = self.root
        d = hits = from_evictable = 0
        while d < end:
            children = node.children
            child = children.get(hashes[d])
            if child is None or not child.present:
                break
            m = matched(child, hashes, d, end)
            hits += m
            if not child.ref:
                from_evictable += m
            if m < child.n:
                break
            node = child
            d += m
        return hits, from_evictable

    # -- changes -------------------------------------------------------------------------------
    def reference(self, hashes: Sequence[Hashable], hits: int) -> list:
        """Take a reference on the cached prefix ``hashes[:hits]`` (a prefix hit, as matched just before);
        returns the request's runs (see the module's docstring)."""
        if not hits:
            return []
        node = self.root
        d = 0
        while d < hits:
            child = node.children[hashes[d]]
            m = matched(child, hashes, d, hits)
            if m < child.n:
                child = self._split(child, m)
            if not child.ref:
                self._lru_remove(child)
                self.evictable -= m
                self.referenced += m
            child.ref += 1
            node = child
            d += m
        self.references += hits
        return [node, hits]

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks, evicting LRU cached blocks when free ones run out. The caller has checked
        ``available() >= n``."""
        if n <= self.free:
            self.free -= n
            return
        evict = n - self.free
        self.free = 0
        self.evictions += evict
        self.evictable -= evict
        lru = self._lru
        while evict:
            node = lru.next
            if node.n <= evict:
                evict -= node.n
                self._lru_remove(node)
                self._drop(node)
            else:
                self._evict_tail(node, evict)
                evict = 0

    def register(self, hashes: Sequence[Hashable], lo: int, hi: int, held: list) -> int:
        """Cache freshly computed full blocks ``hashes[lo:hi]``, held by the computing request (whose runs
        are ``held``, extended in place); content already cached stays private (a duplicate). Returns how
        many blocks moved from private to cached. One call per prefill chunk."""
        node = self._descend(hashes, lo)
        d = lo
        new = 0
        while d < hi:
            children = node.children
            child = children.get(hashes[d])
            if child is None:
                if not children and held and held[-2] is node and node.ref == 1:
                    # its own last run, a leaf only it holds (an earlier chunk): the run grows in place
                    _grown(node, hashes[d:hi])
                    held[-1] += hi - d
                    new += hi - d
                    break
                child = Node(node, _packed(hashes[d:hi]), 0, hi - d, 1, True)
                if children is _LEAF:
                    node.children = {hashes[d]: child}
                else:
                    children[hashes[d]] = child
                new += hi - d
                _hold(held, child, hi - d)
                break
            m = matched(child, hashes, d, hi)
            if m < child.n:
                child = self._split(child, m)
            if not child.present:  # a hole refilled
                child.present = True
                child.ref = 1
                new += m
                _hold(held, child, m)
            node = child
            d += m
        self.referenced += new
        self.references += new
        return new

    def release(self, held: list, private: int) -> None:
        """Drop a request's blocks. Shared blocks are released last-first, so the tail of a prompt is
        evicted before its head (the head is what other requests share)."""
        for i in range(len(held) - 2, -1, -2):
            node = held[i]
            left = held[i + 1]
            self.references -= left
            while left > 0:
                n = node.n
                left -= n
                r = node.ref - 1
                node.ref = r
                if not r:
                    self.referenced -= n
                    self.evictable += n
                    lru = self._lru
                    last = lru.prev
                    node.prev = last
                    node.next = lru
                    last.next = node
                    lru.prev = node
                node = node.parent
        self.free += private

    # -- the tree ------------------------------------------------------------------------------
    def _descend(self, hashes: Sequence[Hashable], depth: int) -> Node:
        """The node ending at ``depth`` blocks along ``hashes``, splitting a run that goes on past it
        and making a hole for any part not in the tree (the blocks before a registered chunk that were
        duplicates, since evicted)."""
        node = self.root
        d = 0
        while d < depth:
            children = node.children
            child = children.get(hashes[d])
            if child is None:
                child = Node(node, _packed(hashes[d:depth]), 0, depth - d, 0, False)
                if children is _LEAF:
                    node.children = {hashes[d]: child}
                else:
                    children[hashes[d]] = child
                return child
            m = matched(child, hashes, d, depth)
            if m < child.n:
                child = self._split(child, m)
            node = child
            d += m
        return node

    def _split(self, node: Node, m: int) -> Node:
        """Cut ``node`` after its first ``m`` blocks; the head becomes a new node above it (same count,
        same state; right after it in the LRU when evictable) and is returned. The tail keeps the object,
        so a request's runs stay valid."""
        parent = node.parent
        head = Node(parent, node.src, node.off, m, node.ref, node.present)
        key = node.src[node.off]
        parent.children[key] = head
        node.off += m
        node.n -= m
        head.children = {node.src[node.off]: node}
        node.parent = head
        if node.present and not node.ref:  # evictable: the head is newer than the tail
            after = node.next
            head.prev = node
            head.next = after
            node.next = head
            after.prev = head
        return head

    def _evict_tail(self, node: Node, k: int) -> None:
        """Evict the last ``k`` blocks of evictable ``node`` (fewer than it holds)."""
        if not node.children:
            node.n -= k
            _cut(node.src, node.off + node.n)
            return
        self._split(node, node.n - k)  # the head stays evictable, right after the tail
        self._lru_remove(node)
        node.present = False

    def _drop(self, node: Node) -> None:
        """``node``'s blocks are all evicted: a hole if it has cached nodes below, else out of the tree
        with any hole above left without children."""
        if node.children:
            node.present = False
            return
        parent = node.parent
        del parent.children[node.src[node.off]]
        _cut(node.src, node.off)
        root = self.root
        while parent is not root and not parent.present and not parent.children:
            node, parent = parent, parent.parent
            del parent.children[node.src[node.off]]

    def _lru_remove(self, node: Node) -> None:
        prev, after = node.prev, node.next
        prev.next = after
        after.prev = prev
        node.prev = node.next = None

    def tally(self) -> tuple[int, int, int]:
        """Referenced blocks, evictable blocks and references, counted by walking the tree and the LRU
        list (for the checks: they must equal the running counts)."""
        referenced = evictable = references = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.present and node is not self.root:
                if node.ref:
                    referenced += node.n
                    references += node.ref * node.n
                else:
                    evictable += node.n
            if node.children:
                stack.extend(node.children.values())
        in_lru = 0
        node = self._lru.next
        while node is not self._lru:
            in_lru += node.n
            node = node.next
        if in_lru != evictable:
            raise AssertionError(f"LRU list holds {in_lru} blocks, the tree {evictable} evictable")
        return referenced, evictable, references


def _hold(held: list, node: Node, n: int) -> None:
    """Add ``n`` blocks ending with ``node`` to a request's runs, extending the last run when it ends
    right above ``node``."""
    if held and held[-2] is node.parent:
        held[-2] = node
        held[-1] += n
    else:
        held.append(node)
        held.append(n)
