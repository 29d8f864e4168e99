"""An engine's loads from its CPU KV tier: the requests taken out of the queue while their blocks land.

distsim/instance/cpu_kv.py says what is modelled after vLLM's KV offloading and what is simplified; the tier
(:class:`~distsim.instance.cpu_kv.CpuKvTier`) keeps the blocks and times the copies. This object, built with
the instance when it has a tier (distsim.instance.instance), starts a load from the admission loop and puts
the request back at the front of the queue when it lands. Stores are offered by the step itself
(``Instance._cache_full_blocks``), as each prompt block fills.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.events.loop import PRIO_CLUSTER
from distsim.instance.cpu_kv import CpuKvTier
from distsim.instance.decode_set import ceil_div
from distsim.instance.departure import Departure
from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.engine import Engine
    from distsim.request import Request

WAITING, DONE = Phase.WAITING, Phase.DONE


class CpuLoads:
    """The loads in flight on one engine: ``loading``, by request id (of them, those read from the storage
    tier below the CPU tier, distsim.instance.storage_kv: ``from_storage``)."""

    def __init__(self, inst: Engine, tier: CpuKvTier):
        self.inst = inst
        self.tier = tier
        self.storage = tier.storage  # the storage tier, or None
        self.loading: dict[int, Request] = {}  # out of the queue until their blocks land from the CPU tier
        self.from_storage: set[int] = set()
        # with a storage tier, the loads before each request's first admission, by request id: (first block,
        # end, from the drive), what its cached tokens are told apart by (distsim/instance/storage_kv/feature.py)
        self.first_loads: dict[int, list[tuple[int, int, bool]]] | None = None if self.storage is None else {}

    def start(self, waiting, req: Request, now: int, total: int, hits: int, room: int) -> int:
        """The request at the head of ``waiting`` hits ``hits`` blocks on the GPU: load the blocks that
        follow if the CPU tier holds them (else, if the storage tier does, from there). 1: the load started
        and the request left the queue; 0: nothing to load, admit it as usual; -1: stop admission (too few
        blocks: ``room`` is what an admission may take now; or its blocks are being loaded for another
        request and will soon hit on the GPU)."""
        inst = self.inst
        cpu = self.tier
        hashes = req.block_hashes
        cpu.touch(hashes, len(hashes))  # vLLM touches a request's blocks on every lookup
        limit = (total - 1) // inst.bs
        n = cpu.lookup(hashes, hits, limit, now)
        if n <= 0:
            if n == 0 and self.storage is not None:
                return self._start_from_storage(waiting, req, now, total, hits, room, limit)
            return n
        if not self._take(waiting, req, total, hits, n, room):
            return -1
        landed = cpu.start_load(hashes, hits, hits + n, now)
        inst.loop.schedule(landed, PRIO_CLUSTER, self._landed, req)  # lands before steps at that time
        if self.first_loads is not None and req.first_scheduled_us < 0:
            self.first_loads.setdefault(req.request_id, []).append((hits, hits + n, False))
        return 1

    def _start_from_storage(self, waiting, req: Request, now: int, total: int, hits: int, room: int, limit: int) -> int:
        """A miss on the GPU and on the CPU tier: the storage tier's run of blocks, read from the drive and
        then copied over the host link to the GPU as a CPU tier load is (queued behind the loads before it)."""
        storage = self.storage
        hashes = req.block_hashes
        n = storage.lookup(hashes, hits, limit, now)
        if n <= 0:
            return n
        if not self._take(waiting, req, total, hits, n, room):
            return -1
        read = storage.start_read(hashes, hits, hits + n, now)
        cpu = self.tier
        landed = max(read, cpu.h2d_free_us) + cpu.transfer_us(n)
        cpu.h2d_free_us = landed
        storage.load_us += landed - now
        self.from_storage.add(req.request_id)
        self.inst.loop.schedule(landed, PRIO_CLUSTER, self._landed, req)
        if req.first_scheduled_us < 0:
            self.first_loads.setdefault(req.request_id, []).append((hits, hits + n, True))
        return 1

    def _take(self, waiting, req: Request, total: int, hits: int, n: int, room: int) -> bool:
        """Take the head of ``waiting`` out of the queue with its GPU hits referenced and fresh GPU blocks for
        the ``n`` blocks to load; False (nothing taken) when too few blocks are free."""
        inst = self.inst
        hashes = req.block_hashes
        # as for a prefill: the blocks for the whole sequence, or for what it takes now (the loaded ones)
        need = ceil_div(total, inst.bs) - hits if inst.reserve_full else n
        if need > room:
            return False
        waiting.popleft()
        inst.waiting_tokens -= total
        seq = req.seq
        if hits:
            seq.runs = inst.kv.reference(hashes, hits)
            seq.shared_blocks = hits
        inst.kv.allocate(n)
        seq.private_blocks = n
        self.loading[req.request_id] = req
        return True

    def _landed(self, now: int, req: Request) -> None:
        """A load has landed: its blocks join the GPU prefix cache (evictable, most recent first) and the
        request goes back to the front of the queue, where its next admission finds them computed (or,
        cancelled meanwhile, leaves: the blocks stay cached)."""
        inst = self.inst
        del self.loading[req.request_id]
        seq = req.seq
        hashes = req.block_hashes
        lo = seq.shared_blocks
        hi = lo + seq.private_blocks
        if self.storage is not None and req.request_id in self.from_storage:
            self.from_storage.discard(req.request_id)
            self.storage.finish_load(hashes, lo, hi)
        else:
            self.tier.finish_load(hashes, lo, hi)
        new = inst.kv.register(hashes, lo, hi, seq.runs)  # a duplicate stays private
        seq.private_blocks -= new
        seq.shared_blocks += new
        inst.kv.release(seq.runs, seq.private_blocks)
        if inst.cancellation is not None and inst.cancellation.load_aborted(req):
            seq.clear(DONE)
            inst.departed(req, now, Departure.ABORTED)
            inst.publish()
            if not inst.busy and inst.waiting:
                inst.wake(now)
            return
        seq.clear(WAITING)
        inst.waiting.appendleft(req)
        inst.waiting_tokens += req.prompt_tokens + req.generated
        inst.publish()
        inst.new_work(now)

    def check(self, where: str) -> None:
        """The tiers' own invariants (INV-15, and INV-32 with a storage tier), given the blocks the loads in
        flight hold."""
        if self.storage is None:
            self.tier.check(where, sum(req.seq.private_blocks for req in self.loading.values()))
            return
        mine = self.from_storage
        self.tier.check(where, sum(r.seq.private_blocks for i, r in self.loading.items() if i not in mine))
        self.storage.check(where, sum(r.seq.private_blocks for i, r in self.loading.items() if i in mine))
