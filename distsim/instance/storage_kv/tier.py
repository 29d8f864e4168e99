"""The storage KV tier of one engine: the blocks its CPU tier evicts, written to a local drive, LRU.

distsim/instance/storage_kv/__init__.py says what is modelled after LMCache's local disk backend and what
is simplified. Counts, never contents: the tier maps each block's content hash to the time its write is
complete, as the CPU tier (distsim/instance/cpu_kv.py) maps its blocks to the time their copy lands.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence

from distsim.errors import SimulationError
from distsim.instance.pins import unpin


class StorageKvTier:
    """Drive-resident KV blocks keyed by content hash, LRU, with the drive's reads and writes as two queues."""

    __slots__ = (
        "total",
        "blocks",
        "pinned",
        "block_bytes",
        "read_bytes_per_s",
        "write_bytes_per_s",
        "latency_us",
        "read_free_us",
        "write_free_us",
        "writes_landing",
        "written_blocks",
        "dropped_blocks",
        "evicted_blocks",
        "forgotten_blocks",
        "writes",
        "loads",
        "hit_blocks",
        "load_us",
        "write_us",
    )

    def __init__(self, total_blocks: int, block_bytes: float, read_bytes_per_s: float, write_bytes_per_s: float,
                 latency_us: float):
        self.total = total_blocks
        # hash -> the time its write is complete, least recently used first
        self.blocks: OrderedDict[Hashable, int] = OrderedDict()
        self.pinned: dict[Hashable, int] = {}  # hash -> loads in flight reading it (never evicted meanwhile)
        self.block_bytes = block_bytes  # one block's KV over all the engine's GPUs (each rank writes its shard)
        self.read_bytes_per_s = read_bytes_per_s
        self.write_bytes_per_s = write_bytes_per_s
        self.latency_us = latency_us  # each read or write operation's fixed time
        self.read_free_us = 0  # the drive's reads are busy until then
        self.write_free_us = 0  # ... and its writes
        self.writes_landing: deque[int] = deque()  # when the writes in flight complete, in order
        self.written_blocks = 0  # blocks whose write was accepted (landed or in flight)
        self.dropped_blocks = 0  # evicted from the CPU tier, not written: no room could be made
        self.evicted_blocks = 0
        self.forgotten_blocks = 0  # emptied with the engine's caches (a drained engine: its drive goes too)
        self.writes = 0
        self.loads = 0
        self.hit_blocks = 0
        self.load_us = 0  # summed waits of requests for their loads (the drive, then the host link to the GPU)
        self.write_us = 0  # summed write times (the drive's write queue's busy time)

    @property
    def free(self) -> int:
        """Blocks the tier can take without evicting."""
        return self.total - len(self.blocks)

    def op_us(self, n: int, bytes_per_s: float) -> int:
        """Whole microseconds of one operation on ``n`` blocks: the latency plus the bytes at the rate, half up
        (as the CPU tier and the P/D transfer round)."""
        return math.floor(self.latency_us + n * self.block_bytes / bytes_per_s * 1e6 + 0.5)

    # -- writes ------------------------------------------------------------------------------------
    def write_back(self, victims: Sequence[Hashable], now: int) -> None:
        """The CPU tier evicts ``victims`` now: write those the drive lacks in one operation after the writes
        already queued; refresh those it holds. When too few blocks can be evicted to hold them, the write
        is dropped (as LMCache's disk backend drops a put it finds no room for): the blocks are lost."""
        blocks = self.blocks
        new = []
        for h in victims:
            if h in blocks:
                blocks.move_to_end(h)  # LMCache skips a repeated save; the copy is as fresh as its use
            else:
                new.append(h)
        if not new:
            return
        free = self.free
        if len(new) > free and not self._evict(len(new) - free, now):
            self.dropped_blocks += len(new)
            return
        duration = self.op_us(len(new), self.write_bytes_per_s)
        end = max(now, self.write_free_us) + duration
        self.write_free_us = end
        self.writes_landing.append(end)
        self.write_us += duration
        self.writes += 1
        for h in new:
            blocks[h] = end
        self.written_blocks += len(new)

    def next_write_landing(self, now: int) -> int | None:
        """When the next write in flight after ``now`` completes (None when none is)."""
        landing = self.writes_landing
        while landing and landing[0] <= now:
            landing.popleft()
        return landing[0] if landing else None

    def _evict(self, n: int, now: int) -> bool:
        """Drop the ``n`` least recently used blocks that are written and not being read; False (and nothing
        dropped) when there are fewer."""
        pinned = self.pinned
        victims = []
        for h, ready in self.blocks.items():
            if ready <= now and h not in pinned:
                victims.append(h)
                if len(victims) == n:
                    break
        else:
            return False
        for h in victims:
            del self.blocks[h]
        self.evicted_blocks += n
        return True

    # -- reads -------------------------------------------------------------------------------------
    def touch(self, hashes: Sequence[Hashable], lo: int, hi: int) -> None:
        """Mark the held blocks among ``hashes[lo:hi]`` as just used, the first one most recent."""
        blocks = self.blocks
        for i in range(min(hi, len(hashes)) - 1, lo - 1, -1):
            h = hashes[i]
            if h in blocks:
                blocks.move_to_end(h)

    def lookup(self, hashes: Sequence[Hashable], start: int, limit: int, now: int) -> int:
        """How many blocks from ``hashes[start]`` on (up to ``limit``) are written and readable now, in a row;
        -1 when one of them is being loaded for another request (it will soon hit on the GPU)."""
        blocks = self.blocks
        pinned = self.pinned
        n = 0
        for i in range(start, min(limit, len(hashes))):
            h = hashes[i]
            ready = blocks.get(h)
            if ready is None or ready > now:
                break
            if h in pinned:
                return -1
            n += 1
        if n:
            self.touch(hashes, start, start + n)
        return n

    def start_read(self, hashes: Sequence[Hashable], lo: int, hi: int, now: int) -> int:
        """Read ``hashes[lo:hi]`` (found by :meth:`lookup`) in one operation after the reads already queued;
        they stay on the drive, pinned until :meth:`finish_load`. Returns when the read is done."""
        blocks = self.blocks
        pinned = self.pinned
        for i in range(lo, hi):
            h = hashes[i]
            if blocks[h] > now:  # causality: only a block whose write has completed is read
                raise SimulationError(f"INV-32: storage tier reads block {h!r} before its write lands")
            pinned[h] = pinned.get(h, 0) + 1
        end = max(now, self.read_free_us) + self.op_us(hi - lo, self.read_bytes_per_s)
        self.read_free_us = end
        self.loads += 1
        self.hit_blocks += hi - lo
        return end

    def finish_load(self, hashes: Sequence[Hashable], lo: int, hi: int) -> None:
        """The load of ``hashes[lo:hi]`` has landed on the GPU: unpin its blocks."""
        unpin(self.pinned, hashes, lo, hi)

    def forget(self) -> None:
        """Empty the tier, keeping the counters (the engine leaves; no load is in flight then)."""
        self.forgotten_blocks += len(self.blocks)
        self.blocks.clear()
        self.writes_landing.clear()

    # -- checks ------------------------------------------------------------------------------------
    def check(self, where: str, loading_blocks: int) -> None:
        """INV-32: the tier's blocks are conserved and its counters add up; ``loading_blocks`` is the number
        of blocks the instance's loads from it read. Raises SimulationError."""
        held = len(self.blocks)
        if held > self.total:
            raise SimulationError(f"INV-32: {where}: storage tier holds {held} blocks > capacity {self.total}")
        if self.written_blocks - self.evicted_blocks - self.forgotten_blocks != held:
            raise SimulationError(
                f"INV-32: {where}: storage tier counts: written {self.written_blocks} - evicted"
                f" {self.evicted_blocks} - forgotten {self.forgotten_blocks} != held {held}"
            )
        if sum(self.pinned.values()) != loading_blocks or not self.pinned.keys() <= self.blocks.keys():
            raise SimulationError(
                f"INV-32: {where}: storage tier pins {sum(self.pinned.values())} block reads, loads in flight"
                f" read {loading_blocks} (or a pinned block is not held)"
            )
