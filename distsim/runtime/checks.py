"""What resolve checks about request types and runtime pools together (one ConfigError naming the key)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from distsim.errors import ConfigError

if TYPE_CHECKING:
    from distsim.cells.settings import CellSettings
    from distsim.cluster.pools import PoolSpec
    from distsim.request import Request
    from distsim.runtime.settings import RuntimePoolSpec


def _given_types(requests: Iterable[Request]) -> set[str]:
    """The types in a request list the caller gave (tests, validation)."""
    return {r.rtype for r in requests} if isinstance(requests, (list, tuple)) else set()


def check_types(
    requests: Iterable[Request], runtimes: tuple[RuntimePoolSpec, ...], pools: tuple[PoolSpec, ...], cells: CellSettings
) -> bool:
    """Every non-LLM type some request may have is served by a runtime pool; runtime pools are refused where
    they are not modelled (cells). Returns whether types are in play (a
    mix, or typed requests given): the request table's type columns and summary.json's ``types``."""
    mix = getattr(requests, "mix", None)
    wanted = set(mix.served) if mix is not None else _given_types(requests)
    wanted = (wanted | set(getattr(requests, "types_seen", ()))) - {"llm"}  # a trace's type column too
    served = {pool.serves for pool in runtimes}
    for name in sorted(wanted - served):
        if mix is not None and name in mix.served:
            key = f"workload.mix.{name}"
        else:
            key = "workload.path" if name in getattr(requests, "types_seen", ()) else "cluster.pools"
        raise ConfigError(key, f"no pool serves request type {name!r}: add a cluster.pools entry with kind runtime "
                          f"whose runtime.serves (or model's modality) is {name} (serving: {', '.join(sorted(served)) or 'llm only'})")
    if runtimes:
        first = runtimes[0].key
        if cells.enabled:
            raise ConfigError(f"{first}.kind", f"runtime pools are not modelled with cells (cluster.cells.count = {cells.count})")
    return mix is not None or bool(wanted)
