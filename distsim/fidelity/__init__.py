"""Fidelity: read measured runs and step tables, replay and price them, compare, fit.

Readers turn a run (vLLM bench folder, plain CSV) into a :class:`MeasuredRun` and a folder of runs with
per-stage aggregates into a :class:`~distsim.fidelity.suite.data.Suite`; :mod:`.replay` simulates either
kind; :mod:`.metrics` is the one definition of the compared figures; :mod:`.steps` prices and fits step
tables; :mod:`.runfit` fits the serving terms on runs. The command is ``python -m distsim.calibrate``
(its package docstring is the map of the pipeline); ``python -m distsim.validate`` checks one run.
"""

from distsim.fidelity.metrics import METRICS, MetricComparison, compare
from distsim.fidelity.readers import read_run
from distsim.fidelity.run import EngineSettings, MeasuredRun

__all__ = ["METRICS", "EngineSettings", "MeasuredRun", "MetricComparison", "compare", "read_run"]
