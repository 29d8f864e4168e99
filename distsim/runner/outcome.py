"""What a sweep gives back (distsim.runner.sweep.run_sweep) and what its closing report reads
(distsim.runner.table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from distsim.runner.pool import DriverTimes


@dataclass
class SweepOutcome:
    sweep_dir: Path
    results: pd.DataFrame
    ranking: pd.DataFrame
    total: int
    ok: int
    failed: int
    resumed: int
    workers: int
    wall_s: float
    times: DriverTimes = field(default_factory=DriverTimes)
    replaced_workers: int = 0
    exit_code: int = 0
    parts: dict[str, tuple[str, ...]] | None = None  # each config's overrides, for labels
