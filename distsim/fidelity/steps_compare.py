"""Step times from distsim's latency model beside the measured ones, and their errors by step class.

The latency model is built through the normal config path (``load_config(overrides)``, then
``cluster.latency`` with its profile applied), so every ``cluster.latency.*`` override counts; the
hardware is the H100 at TP 1 the tables were measured on, the model each table's own. The measured
times are GPU time of a forward pass without the engine's host work, so the comparison is with
``gpu_step_us`` (the step without host overheads), not ``step_us``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from distsim.catalog import HardwareSpec, ModelSpec, load_hardware
from distsim.config.compose import load_config
from distsim.errors import ConfigError
from distsim.fidelity.steps_data import CLASSES, SHAPE_COLUMNS, StepTable
from distsim.instance.latency.base import LatencyContext, LatencyModel, build_latency_model
from distsim.instance.latency.profile import apply_profile

HARDWARE = "H100"
TENSOR_PARALLEL = 1
ALL = "all"
STEP_COLUMNS = ("model", "kind", "class", *SHAPE_COLUMNS, "measured_us", "simulated_us", "error_pct")
SUMMARY_COLUMNS = ("model", "class", "count", "mean_error_pct", "mean_abs_error_pct", "max_abs_error_pct")


@dataclass
class LatencySettings:
    """``cluster.latency`` after the overrides and its profile (a private copy, never written)."""

    node: DictConfig
    hardware: HardwareSpec

    def value(self, key: str, model: ModelSpec) -> float | None:
        """The value of a coefficient the latency model of ``model`` uses: the configured one, else the
        model's default where it exposes its ``coefficients`` (None when neither says)."""
        v = self.node.get(key)
        if v is None:
            v = getattr(getattr(self.build(model), "coefficients", None), key, None)
        return None if v is None else float(v)

    def build(self, model: ModelSpec, values: Mapping[str, float] = {}) -> LatencyModel:
        """The latency model of ``model`` with ``values`` set over the configured coefficients."""
        node = self.node.copy() if values else self.node
        for key, value in values.items():
            node[key] = float(value)
        latency = build_latency_model(node, LatencyContext(model, self.hardware, TENSOR_PARALLEL))
        if not hasattr(latency, "gpu_step_us"):
            raise ConfigError(
                "cluster.latency.kind",
                f"{self.node.kind!r} gives no GPU-only step time (gpu_step_us): use roofline",
            )
        return latency


def latency_settings(overrides: Sequence[str] = ()) -> LatencySettings:
    """The settings that ``overrides`` give; a bad override or value raises its one-line error here."""
    cfg = load_config(list(overrides))
    node = apply_profile(cfg.cluster.latency)
    node = OmegaConf.create(OmegaConf.to_container(node, resolve=True))  # private, without the profile
    node.profile = None
    return LatencySettings(node, load_hardware(HARDWARE))


def simulate(
    tables: Sequence[StepTable], settings: LatencySettings, values: Mapping[str, float] = {}
) -> np.ndarray:
    """``gpu_step_us`` of every row of ``tables``, in order (one latency model built per table)."""
    out = []
    for table in tables:
        latency = settings.build(table.model, values)
        out.extend(latency.gpu_step_us(shape) for shape in table.shapes())
    return np.asarray(out, dtype=np.float64)


def compare(tables: Sequence[StepTable], simulated: np.ndarray) -> pd.DataFrame:
    """One row per step: :data:`STEP_COLUMNS` (error % = (simulated - measured) / measured x 100)."""
    frame = pd.concat([t.rows for t in tables], ignore_index=True)
    frame["simulated_us"] = simulated
    frame["error_pct"] = (frame["simulated_us"] - frame["measured_us"]) / frame["measured_us"] * 100.0
    return frame[list(STEP_COLUMNS)]


def _stats(model: str, cls: str, errors: np.ndarray) -> list:
    if not errors.size:
        return [model, cls, 0, math.nan, math.nan, math.nan]
    return [
        model,
        cls,
        int(errors.size),
        float(errors.mean()),
        float(np.abs(errors).mean()),
        float(np.abs(errors).max()),
    ]


def summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per model and class, per model over all its steps, and over all steps: count, mean signed
    error %, mean absolute error %, max absolute error % (:data:`SUMMARY_COLUMNS`)."""
    rows = []
    for model in steps["model"].unique():
        mine = steps[steps["model"] == model]
        for cls in CLASSES:
            errors = mine.loc[mine["class"] == cls, "error_pct"].to_numpy()
            if errors.size:
                rows.append(_stats(model, cls, errors))
        rows.append(_stats(model, ALL, mine["error_pct"].to_numpy()))
    rows.append(_stats(ALL, ALL, steps["error_pct"].to_numpy()))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def summary_markdown(table: pd.DataFrame) -> str:
    lines = [
        "| model | class | steps | mean error | mean abs error | max abs error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in table.itertuples(index=False):
        lines.append(
            f"| {r.model} | {r[1]} | {r.count} | {r.mean_error_pct:+.1f}% | "
            f"{r.mean_abs_error_pct:.1f}% | {r.max_abs_error_pct:.1f}% |"
        )
    return "\n".join(lines)
