"""instances.parquet's windowed prefill batching columns (distsim/instance/batching.py).

Present only when some instance batches with a window, so outputs without the option keep their
columns (and their golden digests); an instance that does not batch has zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.instance.instance import Instance


def batching_columns(instances: Sequence[Instance]) -> dict[str, list]:
    """Batches closed, of them by the window's end, requests held, and their mean hold in milliseconds."""
    batchers = [inst.batcher for inst in instances]
    return {
        "prefill_batches": [b.batches if b else 0 for b in batchers],
        "prefill_batches_expired": [b.expired if b else 0 for b in batchers],
        "prefill_batch_held": [b.held_requests if b else 0 for b in batchers],
        "prefill_batch_hold_ms": [b.hold_us / b.held_requests / 1000.0 if b and b.held_requests else 0.0 for b in batchers],
    }
