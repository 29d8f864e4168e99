"""Runner config schema: where sweeps run (Ray) and how faults are handled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class RunnerConfig:
    address: Optional[str] = None  # null: local Ray; "auto" or "ray://host:port": an existing cluster
    num_workers: Optional[int] = None  # null: one actor per CPU of the cluster
    max_retries: int = 2
