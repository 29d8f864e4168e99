"""``table``: a fitted grid of batch latencies (``ms[i][j]`` for ``batch_sizes[i]`` items of ``sizes[j]``),
as a profiler such as Triton's perf_analyzer or Model Analyzer measures it, interpolated linearly in both
directions. Outside the grid's sizes the nearest column holds; a batch smaller than the first batch size
costs the first row. ``max_batch_size`` may not exceed the grid's largest batch: nothing is extrapolated."""

from __future__ import annotations

import numpy as np

from distsim import validators
from distsim.errors import ConfigError
from distsim.runtime.curves.base import CurveContext, ServiceCurve, to_us
from distsim.runtime.curves.registry import CURVES


class TableCurve(ServiceCurve):
    def __init__(self, batch_sizes: list[float], sizes: list[float], ms: np.ndarray):
        self.batch_sizes = np.asarray(batch_sizes, dtype=np.float64)
        self.sizes = np.asarray(sizes, dtype=np.float64)
        self.ms = ms  # rows: batch sizes, columns: request sizes

    def batch_us(self, items: int, size: float) -> int:
        by_batch = [float(np.interp(size, self.sizes, row)) for row in self.ms]
        return to_us(float(np.interp(items, self.batch_sizes, by_batch)))


def _ascending(key: str, values: list[float]) -> list[float]:
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ConfigError(key, f"must be strictly ascending (got {values})")
    return values


@CURVES.register("table")
def table(cfg, ctx: CurveContext) -> TableCurve:
    key = ctx.key
    batches = validators.required(f"{key}.batch_sizes", cfg.batch_sizes, "for curve kind table")
    batches = _ascending(f"{key}.batch_sizes", [validators.integer(f"{key}.batch_sizes[{i}]", b, low=1) for i, b in enumerate(batches)])
    sizes = _ascending(f"{key}.sizes", validators.number_list(f"{key}.sizes", validators.required(f"{key}.sizes", cfg.sizes, "for curve kind table")))
    grid = validators.required(f"{key}.ms", cfg.ms, "for curve kind table")
    if len(grid) != len(batches):
        raise ConfigError(f"{key}.ms", f"needs one row per batch size ({len(batches)}), got {len(grid)}")
    rows = []
    for i, row in enumerate(grid):
        values = validators.number_list(f"{key}.ms[{i}]", row, strict=True)
        if len(values) != len(sizes):
            raise ConfigError(f"{key}.ms[{i}]", f"needs one value per size ({len(sizes)}), got {len(values)}")
        rows.append(values)
    if ctx.max_batch_size > batches[-1]:
        raise ConfigError(
            f"{key}.batch_sizes", f"the grid ends at {batches[-1]} items, below max_batch_size {ctx.max_batch_size}; "
            "measure the larger batches or lower max_batch_size"
        )
    return TableCurve([float(b) for b in batches], sizes, np.asarray(rows, dtype=np.float64))
