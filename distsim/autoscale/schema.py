"""The config node of a pool's ``autoscale`` (``cluster.autoscale`` for the single pool of
``cluster.instances``, ``cluster.pools[i].autoscale`` per pool): the common keys, then the union of every
kind's parameters, each null unless set, so every key exists in the composed config and a new kind with
parameters is one module."""

from __future__ import annotations

import typing
from dataclasses import field, make_dataclass
from typing import Any

# the keys every kind shares; defaults explained in docs/guide/features/autoscaling.md and settings.py
COMMON: list[tuple[str, Any, Any]] = [
    ("kind", str | None, None),  # null: the pool does not autoscale
    ("min", int, 1),  # replicas at least (>= 1)
    ("max", int | None, None),  # replicas at most (required)
    ("interval_s", float, 15.0),  # HPA's sync period
    ("cooldown_s", float, 300.0),  # HPA's scale-down stabilisation window
    ("provision_s", float | None, None),  # null: weights per GPU / load_gbps + startup_s
    ("load_gbps", float, 1.1),  # weight loading, GB/s (vLLM's default safetensors loader, as its docs measure)
    ("startup_s", float, 30.0),  # process start, compile cache and CUDA graph capture (assumed)
]


def _node() -> type:
    from distsim.autoscale.registry import SCALERS

    union: dict[str, Any] = {}
    for kind in SCALERS.names():
        for name, ptype in typing.get_type_hints(SCALERS.get(kind).Params).items():
            if union.setdefault(name, ptype) != ptype:
                raise TypeError(f"autoscaler parameter {name!r} declared as {union[name]} and {ptype}")
    extra = [(name, ptype | None, field(default=None)) for name, ptype in sorted(union.items())]
    node = make_dataclass("AutoscaleConfig", [(n, t, field(default=d)) for n, t, d in COMMON] + extra)
    node.__module__ = __name__  # so pickle (Ray, the sweep's config blobs) finds it here
    return node


AutoscaleConfig = _node()
