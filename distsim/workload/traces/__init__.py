"""Trace readers, one module per format (registered in formats.py by ``workload.format``), and replay."""

from __future__ import annotations

from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow

__all__ = ["READERS", "TraceReader", "TraceRow"]
