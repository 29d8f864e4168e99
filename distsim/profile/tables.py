"""The profile's folder, in the layout ``python -m distsim.calibrate steps`` reads
(``../shared/data/h100_steps``): one step table (its columns, plus ``gpu``, ``tp`` and
``layers_measured``), the operator tables (``micro_*.csv``), the model's config.json as measured
(``models/``, its dtype the backend's), ``profile.json`` (which model each step table is of, the
device's measured peaks, how the profile was taken) and a README.md saying the same in words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from distsim import outputs
from distsim.profile.run import Profile

MANIFEST = "profile.json"
MOE_IMPL = "expert_loop"  # the moe_impl column: one GEMM per expert (the H100 tables': grouped_mm)
FORMAT = 1
STEP_COLUMNS = (
    "model", "kind", "batch", "tokens", "context", "prefill_tokens", "decode_tokens", "measured_ms", "p10_ms",
    "p90_ms", "repetitions", "prefill_seqs", "prefill_context", "prefill_attn_pairs", "prefill_kv_tokens",
    "decode_ctx_total", "gpu", "tp", "layers_measured", "cuda_graph", "backend",
)


def stem_of(model: str, tp: int, layers: int, num_layers: int) -> str:
    """The step table's name, as ``h100_steps`` names its tables (llama-3.1-70b-tp4-8layers)."""
    slug = re.sub(r"[^a-z0-9.]+", "-", model.lower()).strip("-") or "model"
    return slug + (f"-tp{tp}" if tp > 1 else "") + (f"-{layers}layers" if layers < num_layers else "")


def _frame(rows: list[dict], **const: Any) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for key, value in const.items():
        frame.insert(0, key, value)
    return frame


def write_profile(
    p: Profile, out: Path, model: str, config: dict[str, Any], num_layers: int, tp: int, backend: str,
    graphs: bool, command: str, grid: str, target_s: float,
) -> str:
    """Write the folder; returns the step table's stem."""
    stem = stem_of(model, tp, p.shard.layers, num_layers)
    cfg = dict(config, torch_dtype=p.device.dtype)
    config_path = f"models/{stem}.json"
    outputs.prepare_dir(out / "models")
    outputs.write_text(out / config_path, json.dumps(cfg, indent=2) + "\n")
    steps = _frame(p.steps)
    steps.insert(0, "model", stem)
    steps["gpu"], steps["tp"], steps["layers_measured"] = p.device.name, tp, p.shard.layers
    steps["cuda_graph"], steps["backend"] = graphs, backend
    columns = list(STEP_COLUMNS)
    if p.shard.experts:  # as the H100 MoE tables say how their experts ran
        steps["moe_impl"] = MOE_IMPL
        columns.append("moe_impl")
    outputs.write_csv(out / f"{stem}.csv", steps[columns])
    if p.all_reduce:
        outputs.write_csv(out / "micro_all_reduce.csv", _frame(p.all_reduce, gpu=p.device.name))
    for name, rows in (("micro_gemm", p.gemm), ("micro_attention", p.attention), ("micro_sampler", p.sampler), ("micro_moe", p.moe)):
        if rows:
            outputs.write_csv(out / f"{name}_{stem}.csv", _frame(rows, gpu=p.device.name))
    outputs.write_csv(out / "micro_peak.csv", _frame(p.peaks.rows, gpu=p.device.name))
    manifest = {
        "format": FORMAT,
        "command": command,
        "backend": backend,
        "cuda_graph": graphs,
        "grid": grid,
        "target_s": target_s,
        "seconds": round(p.seconds, 1),
        "device": {
            "name": p.device.name,
            "count": p.device.count,
            "memory_bytes": p.device.memory_bytes,
            "dtype": p.device.dtype,
            "matmul_tflops": p.peaks.matmul_tflops,
            "copy_tbps": p.peaks.copy_tbps,
        },
        "tables": {stem: config_path},
        "skipped": p.skipped,
    }
    outputs.write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    outputs.write_text(out / "README.md", readme(p, stem, model, tp, backend, graphs, command))
    return stem


def readme(p: Profile, stem: str, model: str, tp: int, backend: str, graphs: bool, command: str) -> str:
    d = p.device
    how = "replayed from a CUDA graph, timed by CUDA events" if graphs else "run eagerly, timed by the wall clock between device syncs"
    lines = [
        f"# Engine-step times of {model} measured on {d.name}",
        "",
        f"Taken by `{command}` ({backend} backend, {d.dtype}, {p.seconds:.0f} s). Each step is one forward pass of "
        f"{p.shard.layers} layers of {model} at the per-GPU shapes of TP {tp} (no collectives), built as "
        "distsim/profile/forward.py says, "
        f"{how}; `measured_ms` is the median of its repetitions (distsim/profile/backend.py).",
        "",
        f"- `{stem}.csv`: the step table (columns of ../shared/data/h100_steps/README.md; `calibrate steps` reads it)",
        f"- `micro_gemm_{stem}.csv`, `micro_attention_{stem}.csv`, `micro_sampler_{stem}.csv`: the operators alone",
        f"- `micro_peak.csv`: measured peaks: {p.peaks.matmul_tflops:.4g} TFLOP/s (square matmul), "
        f"{p.peaks.copy_tbps:.4g} TB/s (copy, read + write)",
        "- `profile.json`: the table's model config and the device, for the step reader",
        *([f"- `micro_moe_{stem}.csv`: the router GEMM, top-k and the experts' gate_up and down GEMMs by rows per expert"] if p.moe else []),
        *(["- `micro_all_reduce.csv`: all-reduce by bytes and group size (distsim/profile/collectives.py)"] if p.all_reduce else []),
        "",
        "Fit the step model to it: `python -m distsim.calibrate steps THIS_FOLDER --fit --out FIT`.",
    ]
    if p.skipped:
        lines += ["", "Not measured:", "", *[f"- {s}" for s in p.skipped]]
    return "\n".join(lines) + "\n"
