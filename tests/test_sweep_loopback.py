"""A two-node Ray cluster on this machine (scripts/loopback_cluster.py) runs a sweep submitted with
`ray job submit`, as jobs/README.md describes, and both nodes run jobs. About 30 s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_two_node_loopback_cluster_runs_a_submitted_sweep(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "scripts/loopback_cluster.py", "--sweep-dir", str(sweep_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "OK: both nodes ran jobs" in proc.stdout
    assert "4 of 4 jobs ok" in proc.stdout  # the job's own output, tailed by `ray job submit`
    assert (sweep_dir / "results.parquet").exists() and (sweep_dir / "ranking.csv").exists()
