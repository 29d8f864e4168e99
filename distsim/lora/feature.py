"""LoRA's feature: refuses what it cannot compose with, gives the engines the catalog and the routers a
directory of which engine holds which adapter, and reports summary.json's ``lora`` section, the instance
table's adapter columns and the request table's ``adapter`` (only when LoRA is on) and its invariant
(INV-33)."""

from __future__ import annotations

from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts

UNCATALOGUED = 256  # adapters the directory of a world without a catalog keeps track of
COUNTS = ("hits", "misses", "cpu_loads", "disk_loads", "gpu_evictions", "cpu_evictions")


class LoraFeature(Feature):
    name = "lora"

    def __init__(self) -> None:
        self.parts: Parts | None = None
        self.adapters: dict[int, int] = {}  # request id -> the adapter it named, as each request ends

    @staticmethod
    def check(scenario: Any) -> None:
        """Adapters named without a LoRA engine, or with a pool that has none (vLLM answers 404 for an unknown
        model, and routing by model is not modelled), an adapter whose rank
        exceeds a pool's max_lora_rank (vLLM refuses to load it), LoRA beyond mixed pools (P/D), refused."""
        catalog = scenario.features.get("lora")
        lora_pools = [p for p in scenario.pools if p.engine.lora is not None]
        if catalog is not None and not lora_pools:
            raise ConfigError("workload.lora.adapters", "requests name adapters but no pool enables LoRA (set cluster.engine.lora.max_loras)")
        plain = [p.name for p in scenario.pools if p.engine.lora is None]
        if catalog is not None and plain:
            raise ConfigError("workload.lora.adapters", f"requests name adapters but pool {plain[0]} does not enable LoRA: give"
                              " every pool engine.lora (routing requests by the model they name is not modelled)")
        for pool in lora_pools:
            if pool.role != "mixed":
                raise ConfigError(f"{pool.key}.engine.lora.max_loras" if pool.key != "cluster" else "cluster.engine.lora.max_loras",
                                  "LoRA is modelled on mixed pools only (not under P/D disaggregation)")
            top = max(catalog.ranks) if catalog is not None else 0
            if top > pool.engine.lora.max_lora_rank:
                raise ConfigError("workload.lora.ranks" if len(set(catalog.ranks)) > 1 else "workload.lora.rank",
                                  f"an adapter of rank {top} exceeds pool {pool.name}'s max_lora_rank"
                                  f" {pool.engine.lora.max_lora_rank} (vLLM refuses to load it)")

    def attach(self, parts: Parts) -> None:
        """Each LoRA engine learns the catalog's ranks; each cluster's routers get a directory (engine x
        adapter: in a slot or loading there), which the engines keep as they load and evict."""
        self.parts = parts
        catalog = parts.settings.get("lora")
        ranks = catalog.ranks if catalog is not None else ()
        count = len(ranks) or UNCATALOGUED  # a world built by hand has no catalog: room for the adapters it names
        for cluster in parts.clusters:
            directory = np.zeros((len(cluster.instances), count), dtype=bool)
            for row, inst in enumerate(cluster.instances):
                slots = getattr(inst, "lora", None)
                if slots is not None:
                    slots.ranks = ranks
                    slots.directory = directory[row]
            for view in (cluster.entry_view, cluster.decode_view):
                if view is not None:
                    view.adapters = directory
            cluster.record_listeners.append(self._record)

    def _record(self, req: Any) -> None:
        self.adapters[req.request_id] = req.adapter

    def _slots(self) -> list:
        assert self.parts is not None
        return [getattr(inst, "lora", None) for inst in self.parts.world.instances]

    def instance_columns(self, m: Measures) -> None:
        slots = self._slots()
        for name in COUNTS:
            m.instances.add(f"lora_{name}", [getattr(s.counts, name) if s else 0 for s in slots], "int64")
        m.instances.add("lora_load_ms", [s.counts.load_us / 1000.0 if s else 0.0 for s in slots], "float64")

    def report(self, m: Measures) -> dict[str, Any]:
        """The request table's ``adapter`` column (-1: the base model); the adapters' hit rate (requests
        admitted with their adapter already in a slot, over those naming one) and the loads, over the run."""
        named = self.adapters
        m.table.add("adapter", [named.get(rid, -1) for rid in m.table["request_id"].tolist()], "int64")
        slots = [s for s in self._slots() if s is not None]
        totals = {name: sum(getattr(s.counts, name) for s in slots) for name in COUNTS}
        named = totals["hits"] + totals["misses"]
        catalog = m.parts.settings.get("lora")
        return {
            "adapters": catalog.count if catalog is not None else 0,
            "requests_with_adapter": named,
            "hit_rate": round(totals["hits"] / named, 4) if named else None,
            **totals,
            "load_ms": round(sum(s.counts.load_us for s in slots) / 1000.0, 3),
        }

    def check_invariants(self) -> None:
        """The engines check their own slots (distsim.lora.engine, INV-33) with their invariants."""
