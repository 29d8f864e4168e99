"""Fidelity: replay measured serving runs, compare, calibrate the latency model (issue 7).

Readers turn a run (vLLM bench folder, plain CSV) into a :class:`MeasuredRun`; :mod:`.replay` simulates
exactly its requests; :mod:`.metrics` compares; :mod:`.fit` calibrates through :mod:`.optimize`. The
commands are ``python -m distsim.validate`` and ``python -m distsim.calibrate``; docs/fidelity.md.
"""

from distsim.fidelity.metrics import METRICS, MetricComparison, compare
from distsim.fidelity.readers import read_run
from distsim.fidelity.run import EngineSettings, MeasuredRun

__all__ = ["METRICS", "EngineSettings", "MeasuredRun", "MetricComparison", "compare", "read_run"]
