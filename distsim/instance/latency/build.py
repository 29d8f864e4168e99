"""Build the latency model ``cluster.latency`` names, after its profile, warning of keys it does not read.

Apart from base.py (the interface every model imports), since the check must know each kind's own
coefficients, which live in the models' modules.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from distsim.instance.latency.base import LatencyContext, LatencyModel
from distsim.instance.latency.registry import LATENCY_MODELS


def coefficients_by_kind() -> dict[str, tuple[str, ...]]:
    """Each latency kind's own coefficients (the keys of ``cluster.latency`` that only it reads)."""
    from distsim.instance.latency.profile import COEFFICIENTS
    from distsim.instance.latency.roofline3 import Roofline3Coefficients

    return {**COEFFICIENTS, "roofline3": tuple(f.name for f in fields(Roofline3Coefficients))}


def build_latency_model(cfg: Any, ctx: LatencyContext, key: str = "cluster.latency") -> LatencyModel:
    """Build the model named by ``cfg.kind`` (``cfg`` is the ``cluster.latency`` node), after applying
    the latency profile that ``cfg.profile`` names, if any (see :mod:`distsim.instance.latency.profile`)."""
    from distsim.instance.latency.profile import apply_profile
    from distsim.validators import warn_unread

    cfg = apply_profile(cfg, key)
    factory = LATENCY_MODELS.get(cfg.kind, f"{key}.kind")
    own = coefficients_by_kind()
    if cfg.kind in own:  # another kind's coefficients would be silently ignored
        others = {name for kind, names in own.items() if kind != cfg.kind for name in names}
        reads = [name for name in cfg if name not in others - set(own[cfg.kind])]
        warn_unread(cfg, key, reads, f"the {cfg.kind} latency model does not use it")
    return factory(cfg, ctx)
