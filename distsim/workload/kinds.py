"""The registry of workload kinds (``workload.kind``), apart from the source interface in source.py.

A kind is a builder ``(cfg, seed, block_size) -> WorkloadSource`` decorated with
``@KINDS.register("name")``; the first lookup imports the modules that hold them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:  # types only: source.py imports this module
    from distsim.workload.source import SourceBuilder

KINDS: Registry[SourceBuilder] = Registry(
    "workload kind", "workload.kind", ("distsim.workload.synthetic", "distsim.workload.traces.replay")
)
