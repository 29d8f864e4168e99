"""The service-curve interface: a batch's latency from its size in items and its request size.

Why a batch's request size is its largest: a batch is one tensor, padded to its longest member (audio to
the longest clip, images resized to one side), so the largest item sets every item's cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.catalog.hardware import HardwareSpec
    from distsim.catalog.runtime_models import RuntimeModelSpec


@dataclass(frozen=True)
class CurveContext:
    """What a curve may be built from: the pool's model and GPU, and its config path for messages."""

    model: RuntimeModelSpec
    hardware: HardwareSpec
    max_batch_size: int
    key: str  # e.g. "cluster.pools[2].runtime.curve"


class ServiceCurve:
    """Batch latency in whole microseconds (at least 1), deterministic in its arguments."""

    def batch_us(self, items: int, size: float) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


def to_us(ms: float) -> int:
    """Milliseconds to whole microseconds, at least 1 (every batch takes time)."""
    return max(1, int(ms * 1000.0 + 0.5))
