"""The CPU KV tier of one instance (``cluster.engine.cpu_kv_blocks``): vLLM's KV offloading to host memory.

What vLLM does (its ``OffloadingConnector`` over the ``vllm/v1/kv_offload`` CPU backend), and distsim with it:

- **Stores, as blocks are computed.** Every step, each scheduled request offers the blocks that the step
  fills to the CPU tier, in order, from the first block it has not offered yet (its GPU prefix-cache hits
  included); blocks the tier already holds are skipped. Eviction from the GPU cache stores nothing: the
  copy was made when the block was computed. The copy starts once the step's forward pass is done (here:
  at the step's end) and runs asynchronously on the device-to-host direction of the PCIe link, one copy
  after another in submission order. A block becomes loadable only when its copy has finished; until then
  it can be neither hit nor evicted. Stores never delay a step: the copy overlaps compute (its HBM traffic
  is not charged to the step).
- **LRU eviction.** The tier holds at most ``cpu_kv_blocks`` blocks. A store that finds too few free
  blocks evicts the least recently used ones that are neither being stored nor being loaded; if not
  enough can be evicted, that store is skipped and the same blocks are offered again with the next step's.
  A lookup touches the request's blocks (its first block becomes the most recent, its last the least),
  and so does a store.
- **Loads on a GPU prefix-cache miss.** When a waiting request's GPU prefix hit ends, the tier is asked for
  the blocks that follow; the consecutive run of loadable blocks is loaded. The request then holds its
  GPU hits and fresh GPU blocks for the loaded ones, is taken out of the queue (it takes no sequence slot
  and no token budget) and is not schedulable until the blocks have landed. Loads run one after another
  on the host-to-device direction, each taking ``blocks x block bytes per GPU / host link bandwidth``
  (``HardwareSpec.host_link_gbps_per_dir``, GB/s per direction; a block's bytes per GPU are the model's
  KV bytes per token per GPU x block_size), rounded half up to whole microseconds. On landing the blocks join
  the GPU prefix cache and the request goes back to the front of the queue; its next admission counts
  them as computed (prompt tokens it does not compute, reported as cached tokens, as vLLM's
  ``num_cached_tokens`` counts them).

Simplifications (each where exact modelling costs more than it tells):

- Only prompt blocks (those with content hashes) are offered: distsim hashes no generated tokens, for
  the GPU cache either. vLLM also offloads full blocks of generated tokens.
- As the GPU cache's, the CPU hit stops one token short of the prompt: a prompt whose length is a multiple
  of block_size loads all but its last block (vLLM loads it and recomputes only its last token).
- A request whose CPU hit overlaps blocks another request is loading waits for them to land (they then
  hit on the GPU) and stops admission behind it; vLLM skips it and admits the requests after it.
- Between landing and its next admission, the loaded blocks sit in the GPU prefix cache as evictable
  (most recently freed) blocks instead of staying held by the request as in vLLM. Under pressure heavy
  enough to evict them before the next step, the request looks them up again; holding them could
  deadlock an engine whose free blocks all sit in loaded requests.
- A finished or preempted request frees its GPU blocks at once, even if a store from them is still in
  flight (vLLM keeps them until the copy completes, rarely more than a step).
- vLLM's cap on concurrent loads and its load timeout are not modelled.

With a storage tier below (``cluster.engine.storage_kv``, distsim/instance/storage_kv), the blocks this
tier evicts are written back to it, and a lookup that finds nothing here asks it next.

Counts, never contents: the tier maps each block's content hash to the time its copy completes. Lookups
depend on the time only through those completions, so a fast-forwarded decode run planned while requests
wait ends where the next store lands (:meth:`CpuKvTier.next_store_landing`), keeping it equal to stepping.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from distsim.errors import SimulationError
from distsim.instance.pins import unpin

if TYPE_CHECKING:
    from distsim.instance.storage_kv.tier import StorageKvTier


class CpuKvTier:
    """Host-memory KV blocks keyed by content hash, LRU, with the PCIe link's two directions as queues."""

    __slots__ = (
        "total",
        "blocks",
        "pinned",
        "block_bytes",
        "link_bytes_per_s",
        "h2d_free_us",
        "d2h_free_us",
        "stores_landing",
        "stored_blocks",
        "evicted_blocks",
        "loads",
        "hit_blocks",
        "load_us",
        "store_us",
        "storage",
    )

    def __init__(self, total_blocks: int, block_bytes: float, link_bytes_per_s: float):
        self.total = total_blocks
        # hash -> the time its copy is complete, least recently used first
        self.blocks: OrderedDict[Hashable, int] = OrderedDict()
        self.pinned: dict[Hashable, int] = {}  # hash -> loads in flight reading it (never evicted meanwhile)
        self.block_bytes = block_bytes  # one block's KV on one GPU
        self.link_bytes_per_s = link_bytes_per_s  # the GPU's PCIe link to the host, per direction
        self.h2d_free_us = 0  # the host-to-device direction is busy with loads until then
        self.d2h_free_us = 0  # the device-to-host direction is busy with stores until then
        self.stores_landing: deque[int] = deque()  # when the stores in flight complete, in order
        self.stored_blocks = 0
        self.evicted_blocks = 0
        self.loads = 0
        self.hit_blocks = 0
        self.load_us = 0  # summed waits of requests for their loads (queueing on the link plus the copy)
        self.store_us = 0  # summed copy times of stores (the link direction's busy time)
        # the storage tier below (distsim.instance.storage_kv) that evicted blocks are written back to, or None
        self.storage: StorageKvTier | None = None

    @property
    def free(self) -> int:
        """Blocks the tier can take without evicting (every held block is in ``blocks``)."""
        return self.total - len(self.blocks)

    def transfer_us(self, n: int) -> int:
        """Whole microseconds to copy ``n`` blocks one way (half up, as the P/D transfer rounds)."""
        return math.floor(n * self.block_bytes / self.link_bytes_per_s * 1e6 + 0.5)

    # -- lookups -----------------------------------------------------------------------------------
    def touch(self, hashes: Sequence[Hashable], n: int) -> None:
        """Mark the held blocks among ``hashes[:n]`` as just used, the first one most recent."""
        blocks = self.blocks
        for i in range(min(n, len(hashes)) - 1, -1, -1):
            h = hashes[i]
            if h in blocks:
                blocks.move_to_end(h)

    def lookup(self, hashes: Sequence[Hashable], start: int, limit: int, now: int) -> int:
        """How many blocks from ``hashes[start]`` on (up to ``limit``) are loadable now, in a row; -1 when
        one of them is being loaded for another request (wait until it lands on the GPU)."""
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
        return n

    # -- transfers ---------------------------------------------------------------------------------
    def store(self, hashes: Sequence[Hashable], lo: int, hi: int, now: int) -> bool:
        """Copy the blocks ``hashes[lo:hi]`` the tier lacks, after the stores already queued. False when too
        few blocks can be evicted to hold them (nothing is stored: the caller offers them again later)."""
        blocks = self.blocks
        new = [h for h in hashes[lo:hi] if h not in blocks]
        if not new:
            return True
        free = self.free
        if len(new) > free and not self._evict(len(new) - free, now):
            return False
        start = max(now, self.d2h_free_us)
        duration = self.transfer_us(len(new))
        end = start + duration
        self.d2h_free_us = end
        self.stores_landing.append(end)
        self.store_us += duration
        for h in new:
            blocks[h] = end
        self.stored_blocks += len(new)
        self.touch(hashes, hi)
        return True

    def next_store_landing(self, now: int) -> int | None:
        """When the next store in flight after ``now`` completes (None when none is): until then no lookup
        can find more than it does now."""
        landing = self.stores_landing
        while landing and landing[0] <= now:
            landing.popleft()
        first = landing[0] if landing else None
        if self.storage is not None:  # a write landing on the storage tier changes what a lookup finds too
            written = self.storage.next_write_landing(now)
            if written is not None and (first is None or written < first):
                first = written
        return first

    def _evict(self, n: int, now: int) -> bool:
        """Drop the ``n`` least recently used blocks that are loadable and not being loaded; False (and
        nothing dropped) when there are fewer."""
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
        if self.storage is not None:
            self.storage.write_back(victims, now)
        return True

    def start_load(self, hashes: Sequence[Hashable], lo: int, hi: int, now: int) -> int:
        """Load ``hashes[lo:hi]`` (found by :meth:`lookup`) after the loads already queued; they stay in
        the tier, pinned until :meth:`finish_load`. Returns when they will have landed."""
        pinned = self.pinned
        for i in range(lo, hi):
            h = hashes[i]
            pinned[h] = pinned.get(h, 0) + 1
        end = max(now, self.h2d_free_us) + self.transfer_us(hi - lo)
        self.h2d_free_us = end
        self.loads += 1
        self.hit_blocks += hi - lo
        self.load_us += end - now
        return end

    def finish_load(self, hashes: Sequence[Hashable], lo: int, hi: int) -> None:
        """The load of ``hashes[lo:hi]`` has landed: unpin its blocks."""
        unpin(self.pinned, hashes, lo, hi)

    # -- checks ------------------------------------------------------------------------------------
    def check(self, where: str, loading_blocks: int) -> None:
        """INV-15: the tier's blocks are conserved and its counters add up; ``loading_blocks`` is the number
        of blocks the instance's loads in flight read. Raises SimulationError."""
        held = len(self.blocks)
        if held > self.total:
            raise SimulationError(f"INV-15: {where}: CPU tier holds {held} blocks > cpu_kv_blocks {self.total}")
        if self.stored_blocks - self.evicted_blocks != held:
            raise SimulationError(
                f"INV-15: {where}: CPU tier counts: stored {self.stored_blocks} - evicted {self.evicted_blocks}"
                f" != held {held}"
            )
        if sum(self.pinned.values()) != loading_blocks or not self.pinned.keys() <= self.blocks.keys():
            raise SimulationError(
                f"INV-15: {where}: CPU tier pins {sum(self.pinned.values())} block reads, loads in flight read"
                f" {loading_blocks} (or a pinned block is not held)"
            )
