"""The registry of arrival processes (``workload.arrival.process``), apart from arrivals.py.

A process is a builder ``(cfg, key, rng) -> ArrivalProcess`` decorated with
``@PROCESSES.register("name")``; the first lookup imports the module that holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from distsim.registry import Registry

if TYPE_CHECKING:
    from distsim.workload.arrivals import ArrivalProcess

PROCESSES: Registry[Callable[[object, str, np.random.Generator], ArrivalProcess]] = Registry(
    "arrival process", "workload.arrival.process", "distsim.workload.arrivals"
)
