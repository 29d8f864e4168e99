"""The step-table fixture the step-model tests share, and the settings they simulate it on.

A plain module beside the tests (as clikit and simkit are): pytest puts tests/ on sys.path, so
``from stepkit import ...`` works under ``pytest`` and ``python -m pytest`` alike, from any checkout.
"""

from __future__ import annotations

from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "fidelity_steps"
SETTINGS = ["cluster.latency.kind=roofline3"]
