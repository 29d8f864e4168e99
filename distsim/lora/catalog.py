"""The adapter catalog (``workload.lora``): how many adapters the fleet serves, each one's rank, and how
popular each is with the requests (distsim.workload.adapters draws them). Checked here once, for the
workload and for the engines (a bad value: one line naming the key)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.lora.settings import MAX_RANK

KEY = "workload.lora"


@dataclass(frozen=True)
class AdapterCatalog:
    """``count`` adapters with their ranks, and the share of requests naming each: (i + 1) ** -zipf_s,
    normalised, over the (1 - base_share) of requests that name an adapter."""

    count: int
    ranks: tuple[int, ...]
    zipf_s: float
    base_share: float

    def shares(self) -> np.ndarray:
        """Each adapter's probability, then the base model's (the last entry)."""
        weights = np.arange(1, self.count + 1, dtype=np.float64) ** -self.zipf_s
        return np.append(weights / weights.sum() * (1.0 - self.base_share), self.base_share)


def _rank(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RANK:
        raise ConfigError(key, f"must be an integer rank from 1 to {MAX_RANK} (got {value!r})")
    return value


def resolve_catalog(node: Any) -> AdapterCatalog | None:
    """The catalog of a ``workload.lora`` node; None while ``adapters`` is 0 (no request names one)."""
    if node is None:
        return None
    count = node.get("adapters", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"{KEY}.adapters", f"must be an integer >= 0 (got {count!r})")
    if count == 0:
        return None
    ranks = node.get("ranks")
    if ranks is None:
        ranks = (_rank(node.get("rank"), f"{KEY}.rank"),) * count
    else:
        ranks = tuple(_rank(r, f"{KEY}.ranks[{i}]") for i, r in enumerate(ranks))
        if len(ranks) != count:
            raise ConfigError(f"{KEY}.ranks", f"needs one rank per adapter: {count} (got {len(ranks)})")
    zipf_s = node.get("zipf_s")
    if isinstance(zipf_s, bool) or not isinstance(zipf_s, (int, float)) or not math.isfinite(zipf_s) or zipf_s < 0:
        raise ConfigError(f"{KEY}.zipf_s", f"must be a finite number >= 0 (got {zipf_s!r})")
    base = node.get("base_share")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 0.0 <= base < 1.0:
        raise ConfigError(f"{KEY}.base_share", f"must be a share in [0, 1) (got {base!r})")
    return AdapterCatalog(count, ranks, float(zipf_s), float(base))


def catalog_of(cfg: Any) -> AdapterCatalog | None:
    """The run's catalog, from the composed config (the world's feature registry resolves it)."""
    return resolve_catalog(cfg.workload.get("lora"))
