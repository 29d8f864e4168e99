"""summary.json's ``mig`` section (only when some pool runs on MIG slices): how the fleet packs.

Packing efficiency is what slicing is for, so the section says how many GPUs the fleet occupies (whole
GPUs plus the GPUs the slices were packed onto), how many instances and how much KV cache that buys per
GPU, and per sliced pool its profile, slices and GPUs (its billed shares summed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.metrics.columns import Table
from distsim.metrics.summary import rnd

if TYPE_CHECKING:
    from distsim.protocols import World


def mig_summary(cluster: World, instances: Table) -> dict[str, Any]:
    """The fleet's packing (GPUs, instances and KV tokens per GPU) and each sliced pool's."""
    sliced = instances["mig_profile"] != ""
    whole_gpus = int(instances["gpus"][~sliced].sum())
    sliced_gpus = len(set(instances["mig_gpu"][sliced].tolist()))
    gpus = whole_gpus + sliced_gpus
    kv_tokens = int(np.dot(instances["total_kv_blocks"], np.full(len(instances), cluster.instances[0].bs)))
    pools = {}
    for pool in {id(p): p for p in cluster.pool_of}.values():
        if pool.mig is not None:
            pools[pool.name] = {
                "profile": pool.mig.profile.name,
                "slices": pool.count,
                "gpus": rnd(pool.mig.gpus),
                "kv_blocks_per_slice": pool.engine.total_kv_blocks,
            }
    return {
        "gpus": gpus,
        "whole_gpus": whole_gpus,
        "sliced_gpus": sliced_gpus,
        "instances_per_gpu": rnd(len(instances) / gpus),
        "kv_tokens_per_gpu": rnd(kv_tokens / gpus, 1),
        "pools": pools,
    }
