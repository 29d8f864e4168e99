"""The decode set's O(1) block answers (a bytes search over the occupied phases) equal stepping phase by phase."""

import random

from distsim.instance.decode_set import DecodeSet


def _need(counts, bs, c0, k):
    return sum(counts[(1 - c0 - j) % bs] for j in range(k))


def _next(counts, bs, c, limit):
    return next((j for j in range(min(limit, bs)) if counts[(1 - c - j) % bs]), -1)


def test_block_need_and_next_need_match_the_step_by_step_sums():
    rng = random.Random(0)
    for bs in (1, 4, 16):
        dec = DecodeSet(bs)
        for _ in range(300):
            counts = [rng.choice((0, 0, 0, 1, 2)) for _ in range(bs)]
            dec.phase_counts[:] = counts
            dec.count = sum(counts)
            dec._occupied = None  # what join and leave do
            for _ in range(20):
                c, k = rng.randrange(0, 100), rng.randrange(0, 3 * bs + 2)
                assert dec.block_need(c, k) == _need(counts, bs, c, k)
                assert dec.next_need(c, k) == _next(counts, bs, c, k)
