"""One engine's adapters: the GPU slots and the host-memory cache, each least recently used first out.

After vLLM's ``LRUCacheWorkerLoRAManager`` (vllm/lora/worker_manager.py) and ``LoRAModelManager``
(vllm/lora/model_manager.py): ``max_loras`` GPU slots and a CPU cache of ``max_cpu_loras`` adapters. An
adapter a step needs that has no slot is activated into one, the least recently used slot whose adapter no
running request uses giving way; an adapter not in the CPU cache is read from disk first (the least
recently used cached adapter is dropped; vLLM would also free its slot, kept here: a slot in use cannot be
freed mid-step). A use touches the adapter in both.

Modelled differently: vLLM loads inside the step that first needs the adapter, stalling the whole batch;
here the request waits out of the step (the others run) while its adapter loads, so a cold adapter costs
its own requests the load and nobody else (docs/guide/lora.md). Load time: the whole adapter at the disk's
read bandwidth when it is not cached, then each GPU's share over that GPU's own host link (the catalog's
``host_link_gbps_per_dir``), all GPUs of a tensor-parallel engine in parallel.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.errors import SimulationError

if TYPE_CHECKING:
    from distsim.lora.settings import LoraSettings

FREE = -1  # what victim() names when a slot is free (no adapter gives way)


@dataclass
class LoadCounts:
    """What the engine's adapters did: requests admitted with their adapter already in a slot (hits) or
    after a load, loads from the CPU cache and from disk, and the time spent loading."""

    hits: int = 0
    misses: int = 0
    cpu_loads: int = 0
    disk_loads: int = 0
    load_us: int = 0
    gpu_evictions: int = 0
    cpu_evictions: int = 0


class AdapterSlots:
    """The GPU slots (adapter -> the time its load lands; in LRU order, oldest first), the CPU cache (LRU
    order) and the running requests per adapter (``pins``: a slot with pins is never given up)."""

    def __init__(self, max_loras: int, max_cpu_loras: int, settings: LoraSettings):
        self.capacity = max_loras
        self.cpu_capacity = max_cpu_loras
        self.settings = settings
        self.ranks: tuple[int, ...] = ()  # the catalog's rank per adapter (distsim.lora.feature sets it); () or
        # past its end: max_lora_rank
        self.gpu: OrderedDict[int, int] = OrderedDict()  # adapter -> ready_us
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.pins: dict[int, int] = {}
        self.waited: set[int] = set()  # requests that waited for their adapter (not yet admitted)
        self.counts = LoadCounts()
        self.directory = None  # the router's row for this engine (a bool per adapter), when one is kept

    def rank(self, adapter: int) -> int:
        ranks = self.ranks
        return ranks[adapter] if adapter < len(ranks) else self.settings.max_lora_rank

    def in_flight(self, now: int) -> bool:
        """Whether a load has not landed yet."""
        return any(ready_us > now for ready_us in self.gpu.values())

    def ready(self, adapter: int, now: int) -> bool:
        """Whether ``adapter`` is in a slot with its load landed."""
        ready_us = self.gpu.get(adapter)
        return ready_us is not None and ready_us <= now

    def loading(self, adapter: int, now: int) -> bool:
        ready_us = self.gpu.get(adapter)
        return ready_us is not None and ready_us > now

    def victim(self, now: int) -> int | None:
        """The slot a new adapter takes: a free one (FREE), else the least recently used slot that no running
        request uses and whose load has landed; None: every slot is busy."""
        if len(self.gpu) < self.capacity:
            return FREE
        for adapter, ready_us in self.gpu.items():
            if adapter not in self.pins and ready_us <= now:
                return adapter
        return None

    def start_load(self, adapter: int, now: int) -> int | None:
        """Put ``adapter`` in a slot, loading it: the time its load lands, or None when no slot can be had."""
        victim = self.victim(now)
        if victim is None:
            return None
        directory = self.directory
        if victim != FREE:
            del self.gpu[victim]
            self.counts.gpu_evictions += 1
            if directory is not None and victim < len(directory):
                directory[victim] = False
        rank = self.rank(adapter)
        us = self.settings.host_us(rank)
        if adapter in self.cpu:
            self.cpu.move_to_end(adapter)
            self.counts.cpu_loads += 1
        else:
            us += self.settings.disk_us(rank)
            self.counts.disk_loads += 1
            self.cpu[adapter] = None
            if len(self.cpu) > self.cpu_capacity:  # vLLM loads first, then drops the oldest
                self.cpu.popitem(last=False)
                self.counts.cpu_evictions += 1
        self.counts.load_us += us
        self.gpu[adapter] = now + us
        if directory is not None and adapter < len(directory):
            directory[adapter] = True
        return now + us

    def pin(self, adapter: int) -> None:
        """A request of ``adapter`` enters the running batch: it is used now (most recent in both caches)."""
        self.pins[adapter] = self.pins.get(adapter, 0) + 1
        self.gpu.move_to_end(adapter)
        if adapter in self.cpu:
            self.cpu.move_to_end(adapter)

    def unpin(self, adapter: int) -> None:
        left = self.pins[adapter] - 1
        if left:
            self.pins[adapter] = left
        else:
            del self.pins[adapter]

    def check(self, where: str, running_adapters: dict[int, int], now: int) -> None:
        """INV-33: at most ``max_loras`` adapters hold slots and at most ``max_cpu_loras`` are cached; every
        running request's adapter is in a slot, loaded; the pins count the running requests by adapter."""
        if len(self.gpu) > self.capacity or len(self.cpu) > self.cpu_capacity:
            raise SimulationError(
                f"INV-33: {where}: {len(self.gpu)} adapters in {self.capacity} GPU slots, {len(self.cpu)} in a CPU"
                f" cache of {self.cpu_capacity}"
            )
        if running_adapters != self.pins:
            raise SimulationError(f"INV-33: {where}: running requests by adapter {running_adapters} but pins {self.pins}")
        for adapter in running_adapters:
            if not self.ready(adapter, now):
                raise SimulationError(f"INV-33: {where}: adapter {adapter} runs without being loaded in a slot")
