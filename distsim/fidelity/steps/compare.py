"""Step times from distsim's latency model beside the measured ones, and their errors by step class.

The latency model is built through the normal config path (``load_config(overrides)``, then
``cluster.latency`` with its profile applied), so every ``cluster.latency.*`` override counts; the
hardware is the GPU each table was measured on and the tensor-parallel degree its shapes are of
(:class:`~distsim.fidelity.steps.data.StepTable`), the model each table's own, the routing skew each
row's (moe_skew.csv). The measured times are one GPU's kernels of a forward pass, without the engine's
host work and without collectives (the tables measure TP shapes on one GPU), so the comparison is with
:func:`kernel_us`: ``gpu_step_us`` less the collectives, not ``step_us``.
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
from distsim.fidelity.steps.data import CLASSES, SHAPE_COLUMNS, StepTable
from distsim.instance.latency.base import LatencyContext, LatencyModel
from distsim.instance.latency.build import build_latency_model, coefficients_by_kind
from distsim.instance.latency.profile import apply_profile

HARDWARE = "H100"  # the settings' default GPU; each table is compared on its own (StepTable.hardware)
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

    def build(
        self, model: ModelSpec, values: Mapping[str, float] = {}, hardware: HardwareSpec | None = None, tp: int = 1
    ) -> LatencyModel:
        """The latency model of ``model`` with ``values`` set over the configured coefficients, on
        ``hardware`` (default: the settings' GPU) at tensor-parallel degree ``tp``."""
        node = self.node.copy() if values else self.node
        for key, value in values.items():
            node[key] = float(value)
        ctx = LatencyContext(model, hardware or self.hardware, tp)
        latency = build_latency_model(node, ctx)
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


def kernel_us(latency: LatencyModel, shape) -> float:
    """One GPU's kernel time of a step: ``gpu_step_us`` less the collectives (the step tables' measure)."""
    own = getattr(latency, "kernel_us", None)
    if own is not None:
        return float(own(shape))
    return float(latency.gpu_step_us(shape) - latency.breakdown(shape).get("all_reduce_us", 0.0))


def table_models(table: StepTable, settings: LatencySettings, values: Mapping[str, float] = {}) -> list[LatencyModel]:
    """The latency model of each row of ``table`` (one per distinct routing skew; its GPU and TP)."""
    hardware = table.gpu()
    skews = table.skews()
    models_skew = "routing_skew" in coefficients_by_kind().get(settings.node.kind, ())
    built: dict[float, LatencyModel] = {}
    for skew in dict.fromkeys(skews.tolist()):
        extra = dict(values)
        if skew and models_skew:  # a kind without the knob prices every row at uniform routing
            extra["routing_skew"] = skew
        built[skew] = settings.build(table.model, extra, hardware, table.tp)
    return [built[s] for s in skews.tolist()]


def simulate(
    tables: Sequence[StepTable], settings: LatencySettings, values: Mapping[str, float] = {}
) -> np.ndarray:
    """:func:`kernel_us` of every row of ``tables``, in order (a latency model per table and skew)."""
    out = []
    for table in tables:
        models = table_models(table, settings, values)
        out.extend(kernel_us(lm, shape) for lm, shape in zip(models, table.shapes()))
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
