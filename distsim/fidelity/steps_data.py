"""Reading a folder of engine-step tables laid out like ``../shared/data/h100_steps`` (its README defines
the columns): one row per measured step with its StepShape columns and its GPU time ``measured_ms``.

Only the primary tables are read (:data:`PRIMARY`). The ``_attn-varlen``, ``_nograph`` and
``_nocompile`` tables are variants of the same steps, kept to explain the primary ones: one attention
call per layer (slower for mixed GQA steps than the split form, which is the closer stand-in for vLLM),
launches from Python (their short steps measure the launching, not the GPU) and no torch.compile fusion.
Comparing with them would count the same steps twice under forms the README says are not vLLM's.

A table measured on fewer layers than the model has (Mixtral: 8 of 32) is compared with the catalog
model cut to those layers (:func:`cut_layers`) when all its layers are alike, else its
``scaled_step_ms`` column (a 32-layer estimate) is compared with the whole model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from distsim import inputs
from distsim.catalog import ModelSpec, load_model
from distsim.errors import InputFileError
from distsim.instance.latency.base import StepShape

# table (file stem and its ``model`` column) -> catalog model
PRIMARY: dict[str, str] = {
    "llama-3.1-8b": "llama-3.1-8b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "mixtral-8x7b-8layers": "mixtral-8x7b",
}
SHAPE_COLUMNS = (
    "prefill_tokens",
    "prefill_attn_pairs",
    "prefill_kv_tokens",
    "decode_tokens",
    "decode_ctx_total",
    "prefill_seqs",
)
REQUIRED = ("kind", "context", "measured_ms", *SHAPE_COLUMNS)
CLASSES = ("decode", "long context", "prefill", "mixed")
LONG_CONTEXT = 2048  # decode rows attending to more tokens than this are "long context" (8192 here)


@dataclass(frozen=True)
class StepTable:
    """One primary table: its steps and the model they are compared with."""

    name: str  # the file stem
    model: ModelSpec  # as compared: the catalog model, cut to the measured layers where needed
    rows: pd.DataFrame  # model, kind, class, line, SHAPE_COLUMNS, measured_us
    note: str = ""  # how the comparison was set up, when not plainly

    @property
    def moe(self) -> bool:
        return self.model.is_moe

    def shapes(self) -> list[StepShape]:
        cols = [self.rows[c].to_numpy(dtype=np.int64).tolist() for c in SHAPE_COLUMNS]
        return [StepShape(*values) for values in zip(*cols)]


def step_class(kind: str, context: int) -> str | None:
    """The class of a step (:data:`CLASSES`); None for an unknown kind."""
    if kind == "decode":
        return "decode" if context <= LONG_CONTEXT else "long context"
    if kind == "prefill_ctx":
        return "long context"
    return kind if kind in ("prefill", "mixed") else None


def _layer_bytes_outside(model: ModelSpec) -> float:
    """Weight bytes outside the layers: embedding, lm_head, final norm (all at the model dtype)."""
    return (model.embed_params + model.lm_head_params + model.final_norm_params) * model.dtype_bytes


def cut_layers(model: ModelSpec, layers: int) -> ModelSpec | None:
    """``model`` with only ``layers`` of its layers, None when that is not clean: its layers differ
    (some dense, some MoE or sliding), a width is not the model dtype, or the per-layer counts do not
    scale. The check: the cut model's weight bytes are ``layers / num_layers`` of the layers' plus the
    unchanged embedding, lm_head and final norm; FLOPs and KV bytes per token scale the same way."""
    n = model.num_layers
    alike = (
        model.num_moe_layers in (0, n)
        and model.num_sliding_layers in (0, n)
        and not model.first_k_dense_replace
        and not model.quant_method
        and not model.lm_head_weight_bytes
        and (model.active_matmul_params * layers) % n == 0
        and 0 < layers <= n
    )
    if not alike:
        return None
    cut = replace(
        model,
        name=f"{model.name} ({layers} of {n} layers)" if layers < n else model.name,
        num_layers=layers,
        num_moe_layers=model.num_moe_layers * layers // n,
        num_sliding_layers=model.num_sliding_layers * layers // n,
        active_matmul_params=model.active_matmul_params * layers // n,
    )
    share = layers / n
    outside = _layer_bytes_outside(model)
    pairs = [
        (cut.weight_bytes_per_gpu(1) - outside, (model.weight_bytes_per_gpu(1) - outside) * share),
        (cut.linear_flops_per_token(False), model.linear_flops_per_token(False) * share),
        (cut.attn_flops_per_pair(), model.attn_flops_per_pair() * share),
        (cut.kv_bytes_per_token, model.kv_bytes_per_token * share),
    ]
    return cut if all(abs(a - b) <= 1.0 for a, b in pairs) else None


def _numbers(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The shape columns as whole numbers >= 0 and ``measured_ms`` > 0 on every row, else the row's error."""
    out = frame.copy()
    for col in (*SHAPE_COLUMNS, "context", "measured_ms"):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0)
        bad |= (values <= 0) if col == "measured_ms" else (values != np.floor(values))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a positive number" if col == "measured_ms" else "a whole number >= 0"
            raise InputFileError(
                path, f"'{col}' must be {what} (got {inputs.excerpt(frame[col].iloc[i])})", i + 2
            )
        out[col] = values if col == "measured_ms" else values.astype(np.int64)
    return out


def _classes(frame: pd.DataFrame, path: Path) -> list[str]:
    classes = []
    for i, (kind, context) in enumerate(zip(frame["kind"].astype(str), frame["context"])):
        cls = step_class(kind.strip(), int(context))
        if cls is None:
            known = "decode, prefill, prefill_ctx, mixed"
            raise InputFileError(path, f"'kind' must be one of {known} (got {inputs.excerpt(kind)})", i + 2)
        classes.append(cls)
    return classes


def _measured_layers(frame: pd.DataFrame, path: Path, model: ModelSpec) -> int:
    """Layers the table's steps ran: its ``layers_measured`` column (one value), else all of them."""
    if "layers_measured" not in frame.columns:
        return model.num_layers
    values = pd.to_numeric(frame["layers_measured"], errors="coerce").unique()
    ok = len(values) == 1 and math.isfinite(values[0]) and values[0] == int(values[0])
    if not ok or not 0 < int(values[0]) <= model.num_layers:
        got = ", ".join(str(v) for v in values)
        raise InputFileError(
            path, f"'layers_measured' must be one whole number in 1..{model.num_layers} (got {got})"
        )
    return int(values[0])


def _compared(frame: pd.DataFrame, path: Path, model: ModelSpec) -> tuple[ModelSpec, np.ndarray, str]:
    """The model to compare with, the measured times (us) and a note (see the module docstring)."""
    layers = _measured_layers(frame, path, model)
    measured = frame["measured_ms"].to_numpy(dtype=np.float64) * 1000.0
    if layers == model.num_layers:
        return model, measured, ""
    cut = cut_layers(model, layers)
    if cut is not None:
        return (
            cut,
            measured,
            f"{layers} of {model.num_layers} layers measured: compared with the model cut to {layers}",
        )
    if "scaled_step_ms" not in frame.columns:
        raise InputFileError(
            path,
            f"{layers} of {model.num_layers} layers measured, no 'scaled_step_ms' column, "
            f"and {model.name} cannot be cut to {layers} layers cleanly",
        )
    scaled = pd.to_numeric(frame["scaled_step_ms"], errors="coerce").to_numpy(dtype=np.float64)
    if not (np.isfinite(scaled) & (scaled > 0)).all():
        raise InputFileError(path, "'scaled_step_ms' must be a positive number on every row")
    note = (
        f"{layers} of {model.num_layers} layers measured and the model cannot be cut cleanly: "
        "scaled_step_ms (an estimate, not a measurement) compared with the whole model"
    )
    return model, scaled * 1000.0, note


def read_table(path: Path, name: str) -> StepTable:
    """One primary table (``name`` is a key of :data:`PRIMARY`)."""
    frame = inputs.read_csv_frame(path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)}", 1)
    if frame.empty:
        raise InputFileError(path, "no steps (only a header line)")
    frame = _numbers(frame, path)
    model, measured, note = _compared(frame, path, load_model(PRIMARY[name]))
    rows = pd.DataFrame(
        {
            "model": name,
            "kind": frame["kind"].astype(str).str.strip(),
            "class": _classes(frame, path),
            "line": np.arange(2, len(frame) + 2),
        }
    )
    for col in SHAPE_COLUMNS:
        rows[col] = frame[col].to_numpy()
    rows["measured_us"] = measured
    return StepTable(name, model, rows, note)


def read_steps(folder: str | Path) -> list[StepTable]:
    """The primary tables present in ``folder``, in :data:`PRIMARY` order (at least one)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputFileError(root, "not a folder (expected step tables such as llama-3.1-8b.csv)")
    tables = [read_table(root / f"{name}.csv", name) for name in PRIMARY if (root / f"{name}.csv").exists()]
    if not tables:
        raise InputFileError(root, f"no step table: expected one of {', '.join(f'{n}.csv' for n in PRIMARY)}")
    return tables
