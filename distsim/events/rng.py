"""Partitioned random streams.

Every subsystem (the workload, the router, instance 3, ...) draws from its own numpy Generator,
seeded from the master seed and a stable hash of the subsystem's name. Drawing from one stream never
shifts another, so e.g. changing the routing policy leaves the request stream untouched (common random
numbers across policies). Python's ``hash()`` is salted per process and is never used.
"""

from __future__ import annotations

import hashlib

import numpy as np


def name_key(name: str) -> tuple[int, int, int, int]:
    """A stable 128-bit key for a subsystem name, as four 32-bit words."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))  # type: ignore[return-value]


def stream(seed: int, name: str) -> np.random.Generator:
    """The random stream of subsystem ``name`` under master ``seed``."""
    if seed < 0:
        raise ValueError("seed must be >= 0")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=name_key(name))))
