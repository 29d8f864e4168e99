"""Test helper: a sweep on a local Ray (started for it and stopped after, unless one is already up)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any


def sweep_on_local_ray(overrides: list[str], out: Path, workers: int = 2) -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from distsim.runner.api import sweep

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        return sweep(overrides, out, num_workers=workers, progress=False, echo=False)
    finally:
        if started:
            ray.shutdown()
