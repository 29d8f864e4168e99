"""LruSet keeps exactly an OrderedDict's order (the prefix caches' eviction order depends on it) at a
memory that stays proportional to its members however many stale entries its lazy deletes leave."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st
from lruset import LruSet

OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "touch", "pop"]), st.integers(0, 30)), max_size=400)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_lru_set_orders_exactly_as_an_ordered_dict(ops):
    lru, ref = LruSet(), OrderedDict()
    for op, key in ops:
        if op == "add" and key not in ref:
            lru.add(key)
            ref[key] = None
        elif op == "remove" and key in ref:
            lru.remove(key)
            del ref[key]
        elif op == "touch" and key in ref:
            lru.touch(key)
            ref.move_to_end(key)
        elif op == "pop" and ref:
            assert lru.pop_oldest() == ref.popitem(last=False)[0]
        assert len(lru) == len(ref)
        assert (key in lru) == (key in ref)
    assert list(lru) == list(ref)
    assert set(lru.members) == set(ref)


def test_stale_entries_are_compacted_away():
    lru = LruSet()
    for k in range(100):
        lru.add(k)
    for _ in range(50):  # touching and removing leave stale deque entries behind
        for k in range(0, 100, 2):
            lru.touch(k)
        for k in range(1, 100, 2):
            lru.remove(k)
            lru.add(k)
    assert len(lru._order) <= 2 * len(lru) + 64 + 1
    assert [lru.pop_oldest() for _ in range(100)] == list(range(0, 100, 2)) + list(range(1, 100, 2))
