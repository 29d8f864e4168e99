"""Refuse, before building anything, a cluster whose simulator state cannot fit in this machine's memory.

Each simulated instance keeps its scheduler, KV-cache bookkeeping, signal slots and table row: about
7 KB (measured here with ``python -m distsim cluster.instances=N workload.num_requests=10``: peak RSS
164 MB at 1,000 instances, 493 MB at 50,000, 1,487 MB at 200,000, i.e. 6.6-6.7 KB each). A fleet far
beyond the memory available would otherwise fail minutes later in a chain of MemoryErrors.
"""

from __future__ import annotations

import os

from distsim.errors import ConfigError

BYTES_PER_INSTANCE = 7_000
BASE_BYTES = 200_000_000  # the interpreter, numpy, pandas, Hydra and the catalogs


def available_memory_bytes() -> int | None:
    """Memory the kernel says can be taken without swapping (Linux MemAvailable); None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_instances_fit(instances: int, key: str = "cluster.instances") -> None:
    """Raise a ConfigError naming ``key`` when ``instances`` would not fit in the available memory."""
    need = BASE_BYTES + instances * BYTES_PER_INSTANCE
    available = available_memory_bytes()
    if available is not None and need > available:
        raise ConfigError(
            key,
            f"{instances:,} instances need about {need / 1e9:.1f} GB of simulator state (about "
            f"{BYTES_PER_INSTANCE / 1000:.0f} KB each), more than the {available / 1e9:.1f} GB of memory available",
        )
