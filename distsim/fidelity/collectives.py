"""Fitting the all-reduce model's terms (distsim/instance/latency/allreduce.py) to timings by message
size and group size: the public H100 profiles (``scripts/allreduce_fit.py``) and a user's own GPU
profile (``micro_all_reduce.csv``, which ``python -m distsim.profile`` writes and ``calibrate steps
--fit`` fits into ``step_fit.json``).

Each path's model is linear in its terms, so a fit is least squares of the relative error (each row over
its measurement), bounded (no negative time, no bandwidth above the link). A term the table cannot pin
(its column is a combination of the others': one group size cannot tell the ring's fixed time from its
time per step, one message size cannot tell a fixed time from a bandwidth) is held at its prior (the H100
fit) and named; so is one that ends on a bound.

A profile times ``torch.distributed``'s all-reduce, which is NCCL's: vLLM's custom all-reduce (its
fixed time inside a CUDA graph, its two-shot barrier, its peers' read rate) is not in PyTorch, so a
profile leaves those terms at theirs and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from distsim import inputs
from distsim.catalog import HardwareSpec
from distsim.errors import InputFileError
from distsim.instance.latency import allreduce as ar

MIB = 1024 * 1024
NCCL_BAND = (8 * MIB, 64 * MIB)  # the messages vLLM sends NCCL on NVLink (the custom all-reduce takes the smaller)
TABLE = "micro_all_reduce.csv"  # distsim.profile.tables writes it
COLUMNS = ("tp", "bytes", "measured_ms")
# the custom all-reduce's terms, which a profile of torch.distributed's (NCCL's) all-reduce cannot time
UNCAPPED = 1e3  # the most link a bandwidth may reach where the link is unknown (a bound, never an infinity)
CUSTOM_TERMS = ("all_reduce_latency_us", "all_reduce_two_shot_us", "all_reduce_link_efficiency")


def errors(pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Mean and largest absolute relative error, in %, over the points."""
    r = np.abs(pred - y) / y
    return {"points": int(len(y)), "mean_abs_pct": round(100 * float(r.mean()), 2), "max_abs_pct": round(100 * float(r.max()), 2)}


def unpinned(design: np.ndarray, order: Sequence[int]) -> list[int]:
    """The columns to hold so the rest have full rank: in ``order``, each column whose removal keeps the
    design's rank (it is a combination of the others)."""
    held: list[int] = []
    rank = lambda cols: int(np.linalg.matrix_rank(design[:, cols])) if cols else 0  # noqa: E731
    for j in order:
        free = [c for c in range(design.shape[1]) if c not in held]
        if rank(free) < len(free) and rank([c for c in free if c != j]) == rank(free):
            held.append(j)
    return held


def relative_lstsq(design: np.ndarray, y: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None,
                   target: np.ndarray | None = None) -> np.ndarray:
    """Least squares of the relative error (each row divided by its measurement ``y``) of ``design @ x``
    against ``target`` (default ``y``), within [low, high] where the free solution leaves them."""
    a, b = design / y[:, None], (np.ones_like(y) if target is None else target / y)
    x, *_ = np.linalg.lstsq(a, b, rcond=None)
    lo = np.full(len(x), -np.inf) if low is None else low
    hi = np.full(len(x), np.inf) if high is None else high
    if np.all(x >= lo) and np.all(x <= hi):
        return x
    from scipy.optimize import lsq_linear

    return lsq_linear(a, b, bounds=(lo, hi), method="bvls").x


@dataclass
class TermFit:
    """One path's fit: each term's value, which were held at their prior or ended on a bound, the error."""

    values: dict[str, float]
    held: list[str] = field(default_factory=list)
    on_bound: list[str] = field(default_factory=list)
    error: dict[str, float] = field(default_factory=dict)
    error_by_tp: dict[int, dict[str, float]] = field(default_factory=dict)
    coefficients: tuple[float, ...] = ()  # the design's coefficients, unrounded (us, us, us per byte)


def fit_terms(design: np.ndarray, y: np.ndarray, names: Sequence[str], prior: np.ndarray, low: np.ndarray,
              high: np.ndarray, order: Sequence[int], to_value) -> tuple[TermFit, np.ndarray]:
    """Fit ``design @ x = y`` (relative error, bounded) with the unpinnable columns held at ``prior``;
    ``to_value`` maps the coefficients onto the named terms. Returns the fit and its predictions."""
    held = unpinned(design, order) if len(y) else list(range(design.shape[1]))
    free = [c for c in range(design.shape[1]) if c not in held]
    x = prior.astype(float).copy()
    if free:
        rest = y - design[:, held] @ prior[held]
        x[free] = relative_lstsq(design[:, free], y, low[free], high[free], rest)
    bound = [c for c in free if any(np.isfinite(b) and abs(x[c] - b) <= 1e-9 * max(1.0, abs(b)) for b in (low[c], high[c]))]
    pred = design @ x
    fit = TermFit(to_value(x), [names[c] for c in held], [names[c] for c in bound], errors(pred, y) if len(y) else {},
                  coefficients=tuple(float(v) for v in x))
    return fit, pred


def ring_fit(n: np.ndarray, s: np.ndarray, y: np.ndarray, link_gbps: float,
             prior: tuple[float, float, float] = ar.NCCL_RING, capped: bool = True) -> TermFit:
    """NCCL's ring: ``fixed + per_step (n - 1) + 2 (n - 1) / n S / (bus link)``, bus at most 1 when
    ``capped`` (a known link)."""
    design = np.c_[np.ones_like(y), n - 1, 2 * (n - 1) / n * s]
    per_byte = 1.0 / (link_gbps * 1e3)  # us per byte at the whole link
    x0 = np.array([prior[0], prior[1], per_byte / prior[2]])
    low, high = np.array([0.0, 0.0, per_byte if capped else per_byte / UNCAPPED]), np.full(3, np.inf)
    names = ("all_reduce_nccl_fixed_us", "all_reduce_nccl_step_us", "all_reduce_nccl_bus_efficiency")

    def to_value(x: np.ndarray) -> dict[str, float]:
        return {names[0]: round(float(x[0]), 3), names[1]: round(float(x[1]), 4), names[2]: round(per_byte / float(x[2]), 4)}

    fit, pred = fit_terms(design, y, names, x0, low, high, (1, 0, 2), to_value)
    fit.error_by_tp = {int(w): errors(pred[n == w], y[n == w]) for w in sorted(set(n.tolist()))}
    return fit


def pcie_fit(n: np.ndarray, s: np.ndarray, y: np.ndarray, link_gbps: float,
             prior: tuple[float, float] = ar.NCCL_PCIE, capped: bool = True) -> TermFit:
    """NCCL over PCIe: ``fixed + S / (share link)``, share at most 1 when ``capped`` (a known link)."""
    design = np.c_[np.ones_like(y), s]
    per_byte = 1.0 / (link_gbps * 1e3)
    x0 = np.array([prior[0], per_byte / prior[1]])
    low, high = np.array([0.0, per_byte if capped else per_byte / UNCAPPED]), np.full(2, np.inf)
    names = ("all_reduce_pcie_fixed_us", "all_reduce_pcie_efficiency")

    def to_value(x: np.ndarray) -> dict[str, float]:
        return {names[0]: round(float(x[0]), 3), names[1]: round(per_byte / float(x[1]), 4)}

    fit, pred = fit_terms(design, y, names, x0, low, high, (0, 1), to_value)
    fit.error_by_tp = {int(w): errors(pred[n == w], y[n == w]) for w in sorted(set(n.tolist()))}
    return fit


@dataclass
class ProfileCollectivesFit:
    """A profile's all-reduce table fitted: the ``cluster.latency`` values, the path, error, warnings."""

    path: str  # nccl_ring (an NVLink GPU) or nccl_pcie
    fit: TermFit
    sizes: int
    group_sizes: list[int]
    warnings: list[str]
    applies: bool  # a catalog GPU: its values are cluster.latency values for it (else only reported)

    def as_json(self) -> dict:
        return {
            "path": self.path, "values": self.fit.values, "held_at_prior": self.fit.held, "on_bound": self.fit.on_bound,
            "error": self.fit.error, "error_by_tp": {str(k): v for k, v in self.fit.error_by_tp.items()},
            "sizes": self.sizes, "group_sizes": self.group_sizes, "in_values": self.applies, "warnings": self.warnings,
        }


def read_table(path: Path) -> pd.DataFrame:
    """A profile's all-reduce table: tp, bytes and measured_ms, each positive."""
    frame = inputs.read_csv_frame(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)} (expected {', '.join(COLUMNS)})")
    values = frame[list(COLUMNS)].apply(pd.to_numeric, errors="coerce")
    if values.isna().any().any() or not (values > 0).all().all() or not (values["tp"] >= 2).all():
        raise InputFileError(path, "tp (at least 2), bytes and measured_ms must be positive numbers in every row")
    return values


def fit_profile(frame: pd.DataFrame, hw: HardwareSpec, catalog_gpu: bool) -> ProfileCollectivesFit:
    """Fit the NCCL terms of ``hw``'s path to a profile's all-reduce table (module docstring); on NVLink
    only the messages vLLM sends NCCL there (:data:`NCCL_BAND`)."""
    nvlink = hw.link_gbps_per_dir > hw.host_link_gbps_per_dir
    warnings: list[str] = []
    if not catalog_gpu:
        warnings.append(f"{hw.name} is no catalog GPU (its link is unknown): the all-reduce terms are reported, "
                        f"bandwidths as fractions of {hw.link_gbps_per_dir:g} GB/s, and not written into the fit's values")
    rows = frame
    if nvlink:
        rows = frame[(frame["bytes"] >= NCCL_BAND[0]) & (frame["bytes"] <= NCCL_BAND[1])]
        if rows.empty:
            warnings.append(f"no all-reduce of {NCCL_BAND[0] // MIB}-{NCCL_BAND[1] // MIB} MiB (the NCCL messages on NVLink) in the table")
    n, s = rows["tp"].to_numpy(float), rows["bytes"].to_numpy(float)
    y = rows["measured_ms"].to_numpy(float) * 1e3
    fitter = ring_fit if nvlink else pcie_fit
    fit = fitter(n, s, y, hw.link_gbps_per_dir, capped=catalog_gpu)
    groups = sorted({int(v) for v in n})
    sizes = len(set(s.tolist()))
    for name in fit.held:
        warnings.append(f"{name} is not pinned by this table ({sizes} message size(s), group size(s) "
                        f"{', '.join(map(str, groups)) or 'none'}): held at its prior")
    for name in fit.on_bound:
        warnings.append(f"{name} ended on its bound: the table is off the {'ring' if nvlink else 'PCIe'} model")
    warnings.append(f"{', '.join(CUSTOM_TERMS)}: not measured (a profile times torch.distributed's all-reduce, "
                    "NCCL's; vLLM's custom all-reduce is not in PyTorch): kept at their values")
    return ProfileCollectivesFit("nccl_ring" if nvlink else "nccl_pcie", fit, sizes, groups, warnings, catalog_gpu)


def fit_folder(folder: Path, hw: HardwareSpec, catalog_gpu: bool) -> ProfileCollectivesFit | None:
    """The fit of ``folder``'s all-reduce table, None when it has none."""
    path = Path(folder) / TABLE
    if not path.is_file():
        return None
    return fit_profile(read_table(path), hw, catalog_gpu)
