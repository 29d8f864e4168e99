"""The registry of length distributions (``workload.input_tokens.dist`` and the like), apart from
lengths.py.

A distribution is a builder ``(cfg, key, integer, lo, hi) -> Dist`` decorated with
``@DISTS.register("name")``; the first lookup imports the module that holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:
    from distsim.workload.lengths import Dist

DISTS: Registry[Callable[..., Dist]] = Registry("length distribution", "workload.input_tokens.dist", "distsim.workload.lengths")
