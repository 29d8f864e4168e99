"""The decoding requests of one instance, kept as aggregates so a step costs the same for any batch.

A decoder is never touched per step. With ``c`` the number of steps the instance has completed and
``r = prompt + decode_offset`` fixed at its join:

    generated       = decode_offset + c
    step s attends  = r + s tokens (its KV slots after allocating for step s)
    needs a block   at step s iff (r + s - 1) % block_size == 0
    finishes        at the end of step  output_tokens - 1 - decode_offset

So the set keeps the count, the sum of ``r`` (the batch's context at step ``c`` is ``sum_r + count * c``),
the count per ``r % block_size`` (the blocks step ``s`` needs are one lookup) and a heap of finish steps.
Live KV signals ask for a run's next block boundary at every read that crosses one; the set answers
with one bytes search over the occupied phases, made again only when a decoder joins or leaves.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.request import Request

DECODE = Phase.DECODE  # a module global: Phase.DECODE goes through the enum's metaclass each time


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class DecodeSet:
    """Count, summed context base, count per block-boundary phase and finish heap of the decoders."""

    __slots__ = ("bs", "count", "ctx_base", "phase_counts", "finish_heap", "_occupied")

    def __init__(self, block_size: int):
        self.bs = block_size
        self.count = 0
        self.ctx_base = 0  # sum over decoders of prompt + decode_offset
        self.phase_counts = [0] * block_size  # decoders by (prompt + decode_offset) % block_size
        # (finish step, request id, decode epoch, request); an entry whose epoch is not the request's is stale
        self.finish_heap: list[tuple[int, int, int, Request]] = []
        self._occupied: bytes | None = None  # byte p is 1 iff phase_counts[p] (None: stale)

    def join(self, req: Request, step: int) -> None:
        """``req`` decodes from step ``step`` on, having generated ``req.generated`` tokens before it."""
        seq = req.seq
        seq.phase = DECODE
        seq.decode_offset = offset = req.generated - step
        r = req.prompt_tokens + offset
        self.count += 1
        self.ctx_base += r
        self.phase_counts[r % self.bs] += 1
        self._occupied = None
        seq.decode_epoch = epoch = seq.decode_epoch + 1
        heappush(self.finish_heap, (req.output_tokens - 1 - offset, req.request_id, epoch, req))

    def leave(self, req: Request) -> None:
        """``req`` stops decoding (finished or preempted); its heap entry goes stale."""
        seq = req.seq
        r = req.prompt_tokens + seq.decode_offset
        self.count -= 1
        self.ctx_base -= r
        self.phase_counts[r % self.bs] -= 1
        self._occupied = None
        seq.decode_epoch += 1

    def finished_by(self, last: int) -> list[Request]:
        """Take out the decoders whose last step is at or before step ``last``, in finish order."""
        heap = self.finish_heap
        done = []
        while heap and heap[0][0] <= last:
            _, _, epoch, req = heappop(heap)
            if req.seq.decode_epoch != epoch:
                continue  # left (preempted) since it was pushed
            self.leave(req)
            done.append(req)
        return done

    def private_blocks(self, req: Request, step: int) -> int:
        """Blocks outside the prefix cache that decoder ``req`` holds once step ``step`` has its slots."""
        seq = req.seq
        return ceil_div(req.prompt_tokens + seq.decode_offset + step, self.bs) - seq.shared_blocks

    def block_need(self, c0: int, k: int) -> int:
        """Blocks the decoders need over steps c0 .. c0+k-1 (one per decoder per block boundary)."""
        bs = self.bs
        full, rem = divmod(k, bs)
        need = full * self.count
        if rem:
            # step c0 + j needs counts[(1 - c0 - j) % bs]: rem phases counting down from (1 - c0) % bs
            counts = self.phase_counts
            top = (1 - c0) % bs
            low = top - rem + 1
            if low >= 0:
                need += sum(counts[low : top + 1])
            else:
                need += sum(counts[: top + 1]) + sum(counts[bs + low :])
        return need

    def next_need(self, c: int, limit: int) -> int:
        """How many of steps c .. c+limit-1 come before the first that needs a block (-1: none does)."""
        occupied = self._occupied
        if occupied is None:  # made again after a join or leave (between runs, never during one)
            self._occupied = occupied = bytes(map(bool, self.phase_counts))
        phase = (1 - c) % self.bs  # step c + j needs counts[(1 - c - j) % bs]: phases counting down from here
        found = occupied.rfind(1, 0, phase + 1)
        if found >= 0:
            j = phase - found
        else:  # past phase 0 the count-down wraps to bs - 1
            found = occupied.rfind(1)
            if found < 0:
                return -1
            j = phase + self.bs - found
        return j if j < limit else -1

    def taken_and_next(self, first: int, started: int, last: int) -> tuple[int, int]:
        """``block_need(first, started)`` and ``next_need(first + started, last - started)`` in one call
        (a live KV read asks both for every run whose value it brings up to date)."""
        return (self.block_need(first, started) if started else 0), self.next_need(first + started, last - started)

    def run_length(self, c: int, available: int) -> int:
        """How many decode-only steps can run from step ``c`` before anyone finishes or the ``available``
        blocks run out: up to and including the earliest finish, as far as the blocks reach."""
        heap = self.finish_heap
        top = heap[0]
        while top[3].seq.decode_epoch != top[2]:
            heappop(heap)
            top = heap[0]
        run = top[0] - c + 1
        if run <= 1:
            return run
        bs = self.bs
        # cheap bound first: each decoder needs at most ceil(run / bs) blocks over the run
        if self.count * -(-run // bs) <= available:
            return run
        steps = np.arange(c, c + run, dtype=np.int64)
        need = np.asarray(self.phase_counts, dtype=np.int64)[(1 - steps) % bs]
        return int(np.searchsorted(np.cumsum(need), available, side="right"))
