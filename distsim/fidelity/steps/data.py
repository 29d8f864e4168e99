"""Reading a folder of engine-step tables laid out like ``../shared/data/h100_steps`` (its README defines
the columns): one row per measured step with its StepShape columns and its GPU time ``measured_ms``.

Only the primary tables are read (:data:`PRIMARY`, :data:`TABLES`). The ``_attn-varlen``, ``_nograph``
and ``_nocompile`` tables are variants of the same steps, kept to explain the primary ones: one attention
call per layer (slower for mixed GQA steps than the split form, which is the closer stand-in for vLLM),
launches from Python (their short steps measure the launching, not the GPU) and no torch.compile fusion.
Comparing with them would count the same steps twice under forms the README says are not vLLM's.

What each table is compared with:

- the GPU it was measured on: its ``gpu`` column (a device name such as "NVIDIA H100 80GB HBM3"), else
  the first catalog GPU the folder's README names;
- its tensor-parallel degree: the ``tp`` column (the per-GPU shapes of TP on one GPU; the tables hold no
  collectives, so they are compared with the kernels alone);
- the catalog model cut to the layers measured (:func:`cut_layers`) when all its layers are alike, else
  its ``scaled_step_ms`` column (a full-depth estimate) with the whole model;
- Llama-4-Scout (``dtype`` column): the FP8 checkpoint (config from ``../h100_vllm_runs/models``) for the
  ``fp8`` rows up to 2048 tokens and the ``fp8_grouped_nofastacc`` rows above (PyTorch's fast-accumulation
  grouped kernel switches to half-empty 256-row tiles between 2049 and 4096 tokens, an artefact of that
  kernel: the README), and the same model unquantised for the ``bf16`` rows; its rows with chunked
  attention (8192 tokens cached: 6 of 8 layers attend only within their chunk) are left out, since the
  step model computes full attention (exact up to 8192 tokens, catalog/models.py);
- qwen3-30b-a3b.csv without its prefill rows: the random router sent those prompts to only 59-83 of the
  128 experts (README, "Expert-load skew"); moe_skew.csv's uniform rows replace them;
- moe_skew.csv's Zipf rows at their skew (``cluster.latency.routing_skew`` = the row's ``s``); its router
  rows are left out (no skew to give them).

A folder that ``python -m distsim.profile`` wrote has a ``profile.json`` (:func:`profile_tables`): its
tables are read too, each with the model config it names beside it (any model, tiny ones included) and,
when its ``gpu`` is no catalog GPU (a CPU, a GPU the catalog lacks), the device's measured peaks in
place of a datasheet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from distsim import inputs
from distsim.catalog import HardwareSpec, ModelSpec, load_hardware, load_model
from distsim.catalog.hardware import HARDWARE_NAMES
from distsim.errors import InputFileError
from distsim.instance.latency.base import StepShape

# table (file stem and its ``model`` column) -> catalog model
PRIMARY: dict[str, str] = {
    "llama-3.1-8b": "llama-3.1-8b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "mixtral-8x7b-8layers": "mixtral-8x7b",
    "llama-3.1-70b-tp4-8layers": "llama-3.1-70b",
    "codellama-34b-tp2-8layers": "codellama-34b",
    "llama-4-scout-fp8-tp2-8layers": "../h100_vllm_runs/models/llama-4-scout-17b-16e-instruct-fp8-dynamic",
    "moe_skew": "",  # rows of several models (its ``model`` column)
}
SKEW_MODELS = {"mixtral-8x7b-8layers": "mixtral-8x7b", "qwen3-30b-a3b": "qwen3-30b-a3b"}
# a table's model group (leave-one-model-out leaves a group out whole)
GROUPS = {
    "mixtral-8x7b-8layers": "mixtral-8x7b",
    "mixtral-8x7b-8layers (moe_skew)": "mixtral-8x7b",
    "qwen3-30b-a3b (moe_skew)": "qwen3-30b-a3b",
    "llama-4-scout-fp8-tp2-8layers": "llama-4-scout",
    "llama-4-scout-bf16-tp2-8layers": "llama-4-scout",
    "llama-3.1-70b-tp4-8layers": "llama-3.1-70b",
    "codellama-34b-tp2-8layers": "codellama-34b",
}
FAST_ACCUM_TILE_TOKENS = 2048  # above it Scout's fp8 rows use the grouped kernel without fast accumulation
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

    name: str  # the file stem (a variant's name for tables read in parts)
    model: ModelSpec  # as compared: the catalog model, cut to the measured layers where needed
    rows: pd.DataFrame  # model, kind, class, line, SHAPE_COLUMNS, measured_us (routing_skew: per row)
    note: str = ""  # how the comparison was set up, when not plainly
    hardware: str = "H100"  # the catalog GPU the steps were measured on
    tp: int = 1  # the tensor-parallel degree whose per-GPU shapes were measured (no collectives)
    group: str = ""  # the model, for leave-one-model-out (the name when empty)
    device: HardwareSpec | None = None  # a profiled device the catalog lacks: its measured peaks

    def gpu(self) -> HardwareSpec:
        """The GPU (or device) the steps are priced on."""
        return self.device or load_hardware(self.hardware)

    @property
    def moe(self) -> bool:
        return self.model.is_moe

    @property
    def model_group(self) -> str:
        return self.group or self.name

    def skews(self) -> np.ndarray:
        """Each row's routing skew (0: uniform)."""
        if "routing_skew" not in self.rows.columns:
            return np.zeros(len(self.rows))
        return self.rows["routing_skew"].to_numpy(dtype=np.float64)

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
    """Weight bytes outside the layers: embedding, lm_head (at its width), final norm."""
    lm_width = model.lm_head_weight_bytes or model.dtype_bytes
    return (model.embed_params + model.final_norm_params) * model.dtype_bytes + model.lm_head_params * lm_width


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
        and model.quant_method in ("", "fp8")
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
    lines = frame["_line"] if "_line" in frame.columns else range(2, len(frame) + 2)
    for line, kind, context in zip(lines, frame["kind"].astype(str), frame["context"]):
        cls = step_class(kind.strip(), int(context))
        if cls is None:
            known = "decode, prefill, prefill_ctx, mixed"
            raise InputFileError(path, f"'kind' must be one of {known} (got {inputs.excerpt(kind)})", int(line))
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


def unquantised(model: ModelSpec) -> ModelSpec:
    """``model`` with every weight at its dtype and no FP8 matmuls (Scout's bf16 rows)."""
    widths = (
        "attn_weight_bytes", "kv_proj_weight_bytes", "layer_replicated_weight_bytes", "dense_mlp_weight_bytes",
        "shared_expert_weight_bytes", "router_weight_bytes", "lm_head_weight_bytes",
    )
    return replace(
        model, name=f"{model.name} (bf16)", quant_method="", expert_weight_bytes=float(model.dtype_bytes),
        **{w: 0.0 for w in widths},
    )


def gpu_of(frame: pd.DataFrame, path: Path, folder_default: str | None) -> str:
    """The catalog GPU a table was measured on: its ``gpu`` column (one device name), else the folder's."""
    if "gpu" not in frame.columns:
        if folder_default is None:
            raise InputFileError(path, "no 'gpu' column and the folder's README names no catalog GPU")
        return folder_default
    names = frame["gpu"].dropna().astype(str).str.strip().unique()
    if len(names) != 1:
        raise InputFileError(path, f"'gpu' must name one device (got {', '.join(names) or 'none'})")
    found = hardware_named(names[0])
    if found is None:
        raise InputFileError(path, f"'gpu' {inputs.excerpt(names[0])} is no catalog GPU ({', '.join(HARDWARE_NAMES)})")
    return found


def hardware_named(device: str) -> str | None:
    """The catalog GPU a device name means ("NVIDIA H100 80GB HBM3" -> H100): the catalog name or alias
    whose letters and digits appear in it, the longest such; None when none does."""
    norm = "".join(ch for ch in device.lower() if ch.isalnum())
    best: tuple[int, str] | None = None
    for name in HARDWARE_NAMES:
        spec = load_hardware(name)
        for alias in (name, *spec.aliases):
            a = "".join(ch for ch in alias.lower() if ch.isalnum())
            if a and a in norm and (best is None or len(a) > best[0]):
                best = (len(a), name)
    return None if best is None else best[1]


def folder_gpu(root: Path) -> str | None:
    """The first catalog GPU the folder's README.md names (the GPU of tables without a ``gpu`` column)."""
    readme = root / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace").lower()
    hits = []
    for name in HARDWARE_NAMES:
        spec = load_hardware(name)
        for alias in (name, *spec.aliases):
            at = text.find(alias.lower())
            if at >= 0:
                hits.append((at, -len(alias), name))
    return min(hits)[2] if hits else None


def _tp(frame: pd.DataFrame, path: Path) -> int:
    if "tp" not in frame.columns:
        return 1
    values = pd.to_numeric(frame["tp"], errors="coerce").unique()
    if len(values) != 1 or not math.isfinite(values[0]) or values[0] != int(values[0]) or values[0] < 1:
        raise InputFileError(path, f"'tp' must be one whole number >= 1 (got {', '.join(str(v) for v in values)})")
    return int(values[0])


def _rows(frame: pd.DataFrame, path: Path, name: str, measured: np.ndarray) -> pd.DataFrame:
    rows = pd.DataFrame(
        {
            "model": name,
            "kind": frame["kind"].astype(str).str.strip().to_numpy(),
            "class": _classes(frame, path),
            "line": frame["_line"].to_numpy(),
        }
    )
    for col in SHAPE_COLUMNS:
        rows[col] = frame[col].to_numpy()
    rows["measured_us"] = measured
    return rows


def _table(frame: pd.DataFrame, path: Path, name: str, model: ModelSpec, gpu: str | None, note: str = "") -> StepTable:
    model, measured, cut_note = _compared(frame, path, model)
    rows = _rows(frame, path, name, measured)
    if "routing_skew" in frame.columns:
        rows["routing_skew"] = frame["routing_skew"].to_numpy(dtype=np.float64)
    notes = "; ".join(n for n in (cut_note, note) if n)
    return StepTable(name, model, rows, notes, gpu_of(frame, path, gpu), _tp(frame, path), GROUPS.get(name, ""))


def read_frame(path: Path) -> pd.DataFrame:
    frame = inputs.read_csv_frame(path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)}", 1)
    if frame.empty:
        raise InputFileError(path, "no steps (only a header line)")
    frame = _numbers(frame, path)
    frame["_line"] = np.arange(2, len(frame) + 2)
    return frame


def _model_path(root: Path, spec: str, path: Path) -> ModelSpec:
    if "/" not in spec:
        return load_model(spec)
    target = (root / spec).resolve()
    if not target.exists():
        raise InputFileError(path, f"the model config {spec!r} is not beside the folder ({target})")
    return load_model(str(target))


def read_tables(path: Path, name: str, gpu: str | None = None) -> list[StepTable]:
    """The tables one primary file gives (``name`` is a key of :data:`PRIMARY`): one for most, two for
    Scout (FP8 and bf16 rows), one per model for moe_skew.csv."""
    frame = read_frame(path)
    root = path.parent
    if name == "moe_skew":
        zipf = frame[frame["routing"].astype(str).str.strip() == "zipf"] if "routing" in frame.columns else frame
        out = []
        for model_name, catalog in SKEW_MODELS.items():
            part = zipf[zipf["model"].astype(str).str.strip() == model_name].copy()
            if part.empty:
                continue
            part["routing_skew"] = pd.to_numeric(part["s"], errors="coerce").to_numpy(dtype=np.float64)
            note = "Zipf expert loads at the row's skew (cluster.latency.routing_skew = s); router rows left out"
            out.append(_table(part, path, f"{model_name} (moe_skew)", load_model(catalog), gpu, note))
        return out
    model = _model_path(root, PRIMARY[name], path)
    if name == "qwen3-30b-a3b":
        kept = frame[frame["kind"].astype(str).str.strip() != "prefill"]
        note = "prefill rows left out: the random router touched 59-83 of 128 experts (README); moe_skew's uniform rows replace them"
        return [_table(kept, path, name, model, gpu, note)]
    if "chunked_attention" in frame.columns:  # Scout's chunked local attention past 8192 tokens: not modelled
        frame = frame[frame["chunked_attention"].isna() | (frame["chunked_attention"].astype(str).str.strip() == "")]
    if "dtype" in frame.columns:
        dtype = frame["dtype"].astype(str).str.strip()
        tokens = frame["prefill_tokens"] + frame["decode_tokens"]
        fast = FAST_ACCUM_TILE_TOKENS
        fp8 = frame[((dtype == "fp8") & (tokens <= fast)) | ((dtype == "fp8_grouped_nofastacc") & (tokens > fast))]
        bf16 = frame[dtype == "bf16"]
        out = []
        if len(fp8):
            note = f"fp8 rows up to {fast} tokens, fp8_grouped_nofastacc rows above (fast accumulation's tile switch)"
            out.append(_table(fp8, path, name, model, gpu, note))
        if len(bf16):
            out.append(_table(bf16, path, name.replace("-fp8-", "-bf16-"), unquantised(model), gpu, "bf16 rows"))
        return out
    return [_table(frame, path, name, model, gpu)]


def read_table(path: Path, name: str) -> StepTable:
    """One primary table (``name`` is a key of :data:`PRIMARY`): the first it gives."""
    return read_tables(path, name, folder_gpu(path.parent))[0]


MANIFEST = "profile.json"  # distsim.profile.tables.MANIFEST


def _device(manifest: dict, path: Path) -> HardwareSpec:
    """A profiled device as the step model prices it: its measured matmul rate and copy bandwidth as
    its peaks (so the fitted efficiencies are fractions of what it measured); no link or price (the
    tables hold no collectives and cost nothing)."""
    d = manifest.get("device")
    try:
        name, tflops, tbps = str(d["name"]), float(d["matmul_tflops"]), float(d["copy_tbps"])
        memory = int(d["memory_bytes"])
    except (TypeError, KeyError, ValueError):
        raise InputFileError(path, "'device' must hold name, matmul_tflops, copy_tbps and memory_bytes") from None
    if not (tflops > 0 and tbps > 0 and math.isfinite(tflops) and math.isfinite(tbps)):
        raise InputFileError(path, f"'device' peaks must be positive numbers (got {tflops}, {tbps})")
    return HardwareSpec(name, tflops, tbps, memory, link_gbps_per_dir=1.0, price_usd_per_gpu_hour=0.0, gpus_per_node=1)


def profile_tables(root: Path) -> list[StepTable]:
    """The step tables a profile's ``profile.json`` lists (none without one)."""
    path = root / MANIFEST
    if not path.is_file():
        return []
    manifest = inputs.read_json(path, what="a profile manifest (python -m distsim.profile)")
    tables = manifest.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise InputFileError(path, "'tables' must map each step table's name to its model config")
    out = []
    for stem, spec in tables.items():
        table = root / f"{stem}.csv"
        if not table.is_file():
            raise InputFileError(path, f"lists {stem!r} but {table.name} is not in the folder")
        frame = read_frame(table)
        model = _model_path(root, str(spec), path)
        names = frame["gpu"].dropna().astype(str).str.strip().unique() if "gpu" in frame.columns else []
        if len(names) == 1 and hardware_named(names[0]) is None:
            built = _table(frame.drop(columns="gpu"), table, stem, model, "H100")
            out.append(replace(built, hardware=names[0], device=_device(manifest, path)))
        else:
            out.append(_table(frame, table, stem, model, None))
    return out


def read_steps(folder: str | Path) -> list[StepTable]:
    """The primary tables present in ``folder``, in :data:`PRIMARY` order, then a profile's
    (:func:`profile_tables`); at least one."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputFileError(root, "not a folder (expected step tables such as llama-3.1-8b.csv)")
    gpu = folder_gpu(root)
    tables = [t for name in PRIMARY if (root / f"{name}.csv").exists() for t in read_tables(root / f"{name}.csv", name, gpu)]
    tables += profile_tables(root)
    if not tables:
        raise InputFileError(root, f"no step table: expected one of {', '.join(f'{n}.csv' for n in PRIMARY)} or a {MANIFEST}")
    return tables
