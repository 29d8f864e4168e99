"""The registry of trace readers (``workload.format``), apart from the reader interface in rows.py.

A reader is a :class:`TraceReader` subclass decorated with ``@READERS.register("format")`` in a module
of this package; the first lookup imports them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.registry import Registry

if TYPE_CHECKING:
    from distsim.workload.traces.rows import TraceReader

READERS: Registry[type[TraceReader]] = Registry("trace format", "workload.format", "distsim.workload.traces")
