"""Trace readers, one per format (a registry by ``workload.format``), and trace replay."""

from __future__ import annotations

from distsim.workload.traces.azure import AzureReader
from distsim.workload.traces.burstgpt import BurstGPTReader
from distsim.workload.traces.mooncake import MooncakeReader
from distsim.workload.traces.rows import TraceReader, TraceRow
from distsim.workload.traces.table import CsvReader, ParquetReader

READERS: dict[str, type[TraceReader]] = {}


def register_reader(name: str, cls: type[TraceReader]) -> None:
    READERS[name] = cls


register_reader("mooncake", MooncakeReader)
register_reader("azure", AzureReader)
register_reader("burstgpt", BurstGPTReader)
register_reader("csv", CsvReader)
register_reader("parquet", ParquetReader)

__all__ = ["READERS", "TraceReader", "TraceRow", "register_reader"]
