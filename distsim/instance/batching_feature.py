"""Windowed prefill batching (distsim/instance/batching.py) as a run's feature: its instances.parquet columns.

Present only when some instance batches with a window, so outputs without the option keep their
columns (and their golden digests); an instance that does not batch has zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from distsim.feature import Feature, Measures

if TYPE_CHECKING:
    from distsim.instance.instance import Instance


class PrefillBatchingFeature(Feature):
    name = "prefill_batching"

    def instance_columns(self, m: Measures) -> None:
        for name, values in batching_columns(m.parts.world.instances).items():
            m.instances.add(name, values, "float64" if name.endswith("_ms") else "int64")


def batching_columns(instances: Sequence[Instance]) -> dict[str, list]:
    """Batches closed, of them by the window's end, requests held, and their mean hold in milliseconds."""
    batchers = [inst.batcher for inst in instances]
    return {
        "prefill_batches": [b.batches if b else 0 for b in batchers],
        "prefill_batches_expired": [b.expired if b else 0 for b in batchers],
        "prefill_batch_held": [b.held_requests if b else 0 for b in batchers],
        "prefill_batch_hold_ms": [b.hold_us / b.held_requests / 1000.0 if b and b.held_requests else 0.0 for b in batchers],
    }
