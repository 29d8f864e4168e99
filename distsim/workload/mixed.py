"""A mixed source: the configured source's requests, each given a type from the mix (distsim.workload.mix).

Why a wrapper: the LLM requests of a mixed run must be exactly the requests the same seed gives without a
mix, thinned. So the configured source (synthetic or trace) generates every request as today, from its own
streams; this wrapper then draws each request's type from its own stream ("workload/types") and, for a
non-LLM type, the request's size from that type's streams ("workload/types/NAME/items", ".../size"). An LLM
request passes through untouched (the same object, the same draws); a non-LLM one becomes a
:class:`~distsim.request.TypedRequest` with the same id, arrival and tenant and no tokens. A trace row
that names its type (an optional ``type`` column, distsim.workload.traces) keeps it, with its own sizes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from distsim.events.rng import stream
from distsim.request import Request, new_typed_request
from distsim.workload.base import WorkloadSource
from distsim.workload.lengths import Buffered
from distsim.workload.mix import LLM, Mix

BLOCK = 4096  # type draws made at a time


class MixedSource(WorkloadSource):
    """The configured source's requests, each given a type from the mix (see the module docstring). What it
    knows of itself is its base source's."""

    def __init__(self, base: WorkloadSource, mix: Mix, seed: int):
        self.base, self.mix, self.seed = base, mix, seed
        self.limit, self.duration_us = base.limit, base.duration_us

    @property
    def types_seen(self) -> frozenset[str] | set[str]:  # type: ignore[override]  # the base's, as it reads on
        return self.base.types_seen

    def describe(self) -> dict:
        return self.base.describe()

    def summary(self) -> dict | None:
        return self.base.summary()

    def _codes(self) -> Iterator[int]:
        """Each request's type as an index into ``mix.names``, drawn a block at a time."""
        rng = stream(self.seed, "workload/types")
        cum = np.cumsum(self.mix.shares)
        cum[-1] = 1.0
        while True:
            yield from np.searchsorted(cum, rng.random(BLOCK), side="right").tolist()

    def __iter__(self) -> Iterator[Request]:
        mix, seed = self.mix, self.seed
        draws = {
            name: (t, Buffered(t.items, stream(seed, f"workload/types/{name}/items")),
                   Buffered(t.size, stream(seed, f"workload/types/{name}/size")))
            for name, t in mix.types.items()
        }
        kinds = [draws.get(name) for name in mix.names]  # None: llm
        codes = self._codes()
        for req in self.base:
            kind = kinds[next(codes)]
            if kind is None or req.rtype != LLM:  # an LLM request, or a trace row that named its type
                yield req
                continue
            t, items, size = kind
            yield new_typed_request(req.request_id, req.arrival_us, t.name, int(items.next()), float(size.next()),
                                    t.slo_ms, req.tenant)
