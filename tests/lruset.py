"""An LRU-ordered set at about half the memory of an OrderedDict, for caches with millions of keys.

The prefix caches of a thousand instances hold tens of millions of block keys; an OrderedDict spends
about 90 bytes on each (a dict entry plus a linked-list node). ``LruSet`` keeps a plain dict of the
members and a deque of keys in the order they were added or touched, and deletes lazily: removing or
touching a key leaves its older deque entries behind as stale ones, recognised by a per-key count of
entries in the deque. Counts are small ints (shared objects), so a member costs a dict entry and one
deque slot, about 50 bytes. The deque is compacted when stale entries outnumber live ones, so memory
stays proportional to the members and every operation is O(1) amortised.

Order semantics are exactly an OrderedDict's with ``move_to_end`` and ``popitem(last=False)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator


class LruSet:
    __slots__ = ("_live", "_ghost", "_order")

    def __init__(self) -> None:
        # member -> its entries in _order (the last one is live); the same dict for the set's life, so
        # a hot caller may keep it to take len() without a method call (see ``members``)
        self._live: dict[Hashable, int] = {}
        self._ghost: dict[Hashable, int] = {}  # non-member -> its (stale) entries still in _order
        self._order: deque[Hashable] = deque()  # least recently added or touched first

    @property
    def members(self) -> dict[Hashable, int]:
        """The members as dict keys (read only: values are bookkeeping)."""
        return self._live

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def add(self, key: Hashable) -> None:
        """Make ``key`` (not a member) the most recent member."""
        self._live[key] = self._ghost.pop(key, 0) + 1 if self._ghost else 1
        self._order.append(key)
        if len(self._order) > 2 * len(self._live) + 64:
            self._compact()

    def remove(self, key: Hashable) -> None:
        """Take member ``key`` out (KeyError if it is not one)."""
        self._ghost[key] = self._live.pop(key)

    def touch(self, key: Hashable) -> None:
        """Make member ``key`` the most recent."""
        self._live[key] += 1
        self._order.append(key)
        if len(self._order) > 2 * len(self._live) + 64:
            self._compact()

    def pop_oldest(self) -> Hashable:
        """Take out and return the least recent member (the set must not be empty)."""
        live, ghost, popleft = self._live, self._ghost, self._order.popleft
        while True:
            key = popleft()
            n = live.get(key)
            if n is None:  # an entry of a removed key
                if ghost[key] == 1:
                    del ghost[key]
                else:
                    ghost[key] -= 1
            elif n == 1:  # the live entry
                del live[key]
                return key
            else:  # an older entry of a member touched since
                live[key] = n - 1

    def __iter__(self) -> Iterator[Hashable]:
        """Members, least recent first."""
        remaining = dict(self._live)
        for key in self._order:
            n = remaining.get(key)
            if n == 1:
                yield key
            if n is not None:
                remaining[key] = n - 1

    def _compact(self) -> None:
        """Drop the stale entries: the deque holds each member once, in order."""
        order = list(iter(self))
        self._order.clear()
        self._order.extend(order)
        live = self._live
        for key in order:
            live[key] = 1
        self._ghost.clear()
