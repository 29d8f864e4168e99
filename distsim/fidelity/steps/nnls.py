"""Fit the per-operator step model's GPU coefficients to measured engine steps by bounded linear least
squares, and leave-one-model-out.

Every term of :class:`~distsim.instance.latency.roofline3.Roofline3Latency` is linear in the
coefficients of :data:`~distsim.instance.latency.roofline3.LINEAR` (1/ce, h/ce, 1/ce_e, h_e/ce_e, 1/ae,
1/me, the activation bytes over me, the layer overheads) once it is known which side of each max is the
larger (:meth:`~distsim.instance.latency.roofline3.Roofline3Latency.basis`). So the fit alternates two
steps until no max changes side: take each max's larger side at the current values, then solve the
bounded linear least-squares problem for all coefficients at once (``scipy.optimize.lsq_linear``, BVLS)
on relative residuals (simulated - measured) / measured, each row weighted so that every model and,
within a model, every step class counts the same (:func:`group_weights`).
Bounds keep each coefficient physical: efficiencies in (0, 1], overheads and byte counts >= 0. A
coefficient that no row of the fitted tables moves (the expert terms on dense tables alone) keeps its
start value and is reported as not fitted.

Leave-one-model-out (:func:`lomo`) fits once per model group (a table's ``model_group``: Scout's FP8 and
bf16 rows together, Mixtral's and Qwen3's moe_skew rows with their tables) on the other groups and
scores the group left out at those values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from distsim.errors import UserError
from distsim.fidelity.steps.compare import LatencySettings, compare, table_models
from distsim.fidelity.steps.data import StepTable
from distsim.instance.latency.roofline3 import LINEAR, Roofline3Coefficients, coefficients_of, linear_of

# bounds of the linear coefficients (1/efficiency >= 1: an efficiency of at most 1)
LINEAR_BOUNDS: dict[str, tuple[float, float]] = {
    "inv_ce": (1.0, 20.0),
    "h_inv_ce": (0.0, 1e4),
    "inv_cee": (1.0, 20.0),
    "he_inv_cee": (0.0, 1e5),
    "inv_ae": (1.0, 50.0),
    "inv_me": (1.0, 10.0),
    "act_h": (0.0, 1e3),
    "act_i": (0.0, 1e3),
    "act_r": (0.0, 1e3),
    "layer": (0.0, 1e3),
    "moe_layer": (0.0, 1e3),
}
COLUMN = {name: i for i, name in enumerate(LINEAR)}


@dataclass
class Design:
    """The steps as linear terms: ``sides[n, pair, side, coefficient]`` (the two sides of each max),
    ``additive[n, coefficient]``, ``fixed[n]`` us with no coefficient, ``measured[n]`` us."""

    sides: np.ndarray
    additive: np.ndarray
    fixed: np.ndarray
    measured: np.ndarray

    def matrix(self, beta: np.ndarray) -> np.ndarray:
        """Each row's linear form with every max at its larger side at ``beta``."""
        values = self.sides @ beta  # n, pairs, 2
        side = values.argmax(axis=2)
        chosen = np.take_along_axis(self.sides, side[:, :, None, None], axis=2)[:, :, 0, :]
        return chosen.sum(axis=1) + self.additive

    def predict(self, beta: np.ndarray) -> np.ndarray:
        return (self.sides @ beta).max(axis=2).sum(axis=1) + self.additive @ beta + self.fixed


def _vector(terms: Mapping[str, float]) -> np.ndarray:
    v = np.zeros(len(LINEAR))
    for key, value in terms.items():
        v[COLUMN[key]] += value
    return v


def design(tables: Sequence[StepTable], settings: LatencySettings) -> Design:
    """The design of every row of ``tables`` (built with the per-operator model: kind roofline3)."""
    rows = []
    for table in tables:
        models = table_models(table, settings, {})
        for lm, shape in zip(models, table.shapes()):
            basis = getattr(lm, "basis", None)
            if basis is None:
                raise UserError("--nnls fits the per-operator step model: add cluster.latency.kind=roofline3")
            pairs, add, fixed = basis(shape)
            rows.append(([(_vector(a), _vector(b)) for a, b in pairs], _vector(add), fixed))
    width = max(len(p) for p, _, _ in rows)
    sides = np.zeros((len(rows), width, 2, len(LINEAR)))
    for i, (pairs, _, _) in enumerate(rows):
        for j, (a, b) in enumerate(pairs):
            sides[i, j, 0], sides[i, j, 1] = a, b
    measured = np.concatenate([t.rows["measured_us"].to_numpy(dtype=np.float64) for t in tables])
    return Design(sides, np.array([a for _, a, _ in rows]), np.array([f for _, _, f in rows]), measured)


@dataclass
class BasisFit:
    coefficients: Roofline3Coefficients  # the fitted coefficients (host terms and skew as started)
    linear: dict[str, float]
    start: dict[str, float]
    fitted: list[str]  # the linear coefficients some row moves
    objective: float  # weighted mean squared relative error at the fit
    start_objective: float
    iterations: int
    tables: list[str]
    unused: list[str] = field(default_factory=list)


def group_weights(tables: Sequence[StepTable]) -> np.ndarray:
    """Each row's weight: 1 / (model groups x classes of its group x rows of its class in its group), so
    every model counts the same however many tables it has (Mixtral's, Qwen3's moe_skew rows, Scout's
    two precisions), and within a model every step class."""
    frame = pd.concat([t.rows[["class"]].assign(group=t.model_group) for t in tables], ignore_index=True)
    groups = frame["group"].nunique()
    classes = frame.groupby("group")["class"].transform("nunique")
    count = frame.groupby(["group", "class"])["class"].transform("size")
    return (1.0 / (groups * classes * count)).to_numpy(dtype=np.float64)


def _objective(d: Design, beta: np.ndarray, w: np.ndarray) -> float:
    r = (d.predict(beta) - d.measured) / d.measured
    return float(np.sum(w * r * r))


def fit_basis(
    tables: Sequence[StepTable],
    settings: LatencySettings,
    start: Roofline3Coefficients,
    iterations: int = 100,
    fixed: Sequence[str] = (),
) -> BasisFit:
    """Fit the :data:`LINEAR` coefficients to ``tables`` from ``start`` (see the module docstring); those
    named in ``fixed`` keep their start values."""
    d = design(tables, settings)
    w = group_weights(tables)
    beta = np.array([linear_of(start)[k] for k in LINEAR])
    start_beta = beta.copy()
    moved = [k for k in LINEAR if np.any(d.sides[:, :, :, COLUMN[k]]) or np.any(d.additive[:, COLUMN[k]])]
    moved = [k for k in moved if k not in fixed]
    free = [COLUMN[k] for k in moved]
    lo = np.array([LINEAR_BOUNDS[k][0] for k in moved])
    hi = np.array([LINEAR_BOUNDS[k][1] for k in moved])
    scale = np.sqrt(w) / d.measured
    last: bytes | None = None
    done = 0
    while done < iterations:
        done += 1
        m = d.matrix(beta)
        side = (d.sides @ beta).argmax(axis=2).tobytes()
        a = m[:, free] * scale[:, None]
        rest = np.delete(np.arange(len(LINEAR)), free)
        b = (d.measured - d.fixed - m[:, rest] @ beta[rest]) * scale
        # BVLS may end a hair outside a bound (-1e-15 for an overhead at 0): a value the config refuses
        beta[free] = np.clip(lsq_linear(a, b, bounds=(lo, hi), method="bvls").x, lo, hi)
        if side == last:
            break
        last = side
    linear = {k: float(beta[COLUMN[k]]) for k in LINEAR}
    return BasisFit(
        coefficients=coefficients_of(linear, start),
        linear=linear,
        start={k: float(start_beta[COLUMN[k]]) for k in LINEAR},
        fitted=moved,
        objective=_objective(d, beta, w),
        start_objective=_objective(d, start_beta, w),
        iterations=done,
        tables=[t.name for t in tables],
        unused=[k for k in LINEAR if k not in moved and k not in fixed],
    )


def values_of(k: Roofline3Coefficients) -> dict[str, float]:
    """The GPU coefficients a fit sets, as ``cluster.latency`` values."""
    return {
        name: float(getattr(k, name))
        for name in (
            "compute_efficiency", "gemm_half_tokens", "expert_compute_efficiency", "expert_half_rows",
            "attention_efficiency", "memory_efficiency", "activation_bytes_hidden",
            "activation_bytes_intermediate", "activation_bytes_routed", "layer_overhead_us", "moe_layer_overhead_us",
        )
    }


@dataclass
class Lomo:
    steps: pd.DataFrame  # every row, scored at the fit that left its model group out
    fits: dict[str, BasisFit]  # group -> the fit without it


def lomo(tables: Sequence[StepTable], settings: LatencySettings, start: Roofline3Coefficients) -> Lomo:
    """Leave each model group out in turn: fit on the rest, score it (see the module docstring)."""
    from distsim.fidelity.steps.compare import simulate

    groups = list(dict.fromkeys(t.model_group for t in tables))
    if len(groups) < 2:
        raise UserError("leave-one-model-out needs tables of at least two models")
    frames, fits = [], {}
    for group in groups:
        train = [t for t in tables if t.model_group != group]
        held = [t for t in tables if t.model_group == group]
        fit = fit_basis(train, settings, start)
        fits[group] = fit
        frames.append(compare(held, simulate(held, settings, values_of(fit.coefficients))))
    order = {t.name: i for i, t in enumerate(tables)}
    steps = pd.concat(frames, ignore_index=True)
    steps = steps.iloc[np.argsort(steps["model"].map(order).to_numpy(), kind="stable")].reset_index(drop=True)
    return Lomo(steps, fits)
