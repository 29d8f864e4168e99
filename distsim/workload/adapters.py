"""Each request's LoRA adapter (``workload.lora``; distsim.lora.catalog): drawn from the catalog's
popularity, over the configured source.

Why a wrapper: the requests of a run with adapters must be exactly those the same seed gives without them,
each naming an adapter. So the configured source generates every request as today, from its own streams;
this wrapper then draws each request's adapter from its own stream ("workload/adapters"), one draw per
request whatever it names, so the adapters of the first requests do not depend on the later ones. The turns
of a session name the adapter of its first turn (a conversation stays with its fine-tune), and a trace row
that names its adapter (an optional ``adapter`` column, distsim.workload.traces.table) keeps it. A request
with an adapter gets its prompt's block keys salted by the adapter, as vLLM adds the LoRA's name to the
prefix cache's block hashes: the same prompt under two adapters shares no cached block.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

from distsim.events.rng import stream
from distsim.lora.catalog import AdapterCatalog
from distsim.request import Request
from distsim.workload.base import WorkloadSource

BLOCK = 4096  # adapter draws made at a time
SALT = 0x9E3779B97F4A7C15  # the golden-ratio constant: adapter i's keys are XORed with (i + 1) * SALT mod 2**64
MASK = (1 << 64) - 1


def salted(keys, adapter: int):
    """The block keys of a prompt under ``adapter``."""
    salt = np.uint64(((adapter + 1) * SALT) & MASK)
    return array("Q", (np.frombuffer(keys, dtype=np.uint64) ^ salt).tobytes()) if isinstance(keys, array) else \
        [(k, adapter) for k in keys]


class AdapterSource(WorkloadSource):
    """The configured source's requests, each naming an adapter of the catalog or none (see the module
    docstring). What it knows of itself is its base source's."""

    def __init__(self, base: WorkloadSource, catalog: AdapterCatalog, seed: int):
        self.base, self.catalog, self.seed = base, catalog, seed
        self.limit, self.duration_us = base.limit, base.duration_us
        self.mix, self.feature = base.mix, base.feature

    @property
    def types_seen(self):  # type: ignore[override]  # the base's, as it reads on
        return self.base.types_seen

    def describe(self) -> dict:
        return self.base.describe()

    def summary(self) -> dict | None:
        return self.base.summary()

    def _draws(self) -> Iterator[int]:
        """Each request's adapter (count: the base model, made -1 below), drawn a block at a time."""
        rng = stream(self.seed, "workload/adapters")
        cum = np.cumsum(self.catalog.shares())
        cum[-1] = 1.0
        while True:
            yield from np.searchsorted(cum, rng.random(BLOCK), side="right").tolist()

    def __iter__(self) -> Iterator[Request]:
        count = self.catalog.count
        draws = self._draws()
        sessions: dict[int, int] = {}
        for req in self.base:
            drawn = next(draws)
            if req.adapter < 0:
                if req.session_id >= 0:
                    drawn = sessions.setdefault(req.session_id, drawn)
                req.adapter = drawn if drawn < count else -1
            if req.adapter >= 0 and req.block_hashes:
                req.block_hashes = salted(req.block_hashes, req.adapter)
            yield req
