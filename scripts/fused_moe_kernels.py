"""Kernels a MoE layer launches beyond a dense layer's in the step tables' PyTorch stand-in (the
serving layer's STAND_IN_MOE_EXTRA_KERNELS, distsim/instance/latency/serving.py): the kernel counts of
decode B=1 in the stand-in's op-by-op profiles (../shared/data/h100_steps/profile_*.csv), split by least
squares into a per-step part (embedding, final norm, lm_head, sampling, copies), a per-layer part and a
per-MoE-layer extra.

    python scripts/fused_moe_kernels.py [FOLDER]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

# profile -> (layers profiled, of them MoE layers): the README of the step tables
PROFILES = {"llama-3.1-8b": (32, 0), "qwen2.5-7b": (28, 0), "mixtral-8x7b-8layers": (8, 8), "qwen3-30b-a3b": (48, 48)}
STEP = "decode B=1 C=512"


def split(folder: Path) -> dict[str, float]:
    rows, y = [], []
    for name, (layers, moe) in PROFILES.items():
        d = pd.read_csv(folder / f"profile_{name}.csv")
        rows.append([1.0, layers, moe])
        y.append(float(d.loc[d["step"] == STEP, "kernels"].sum()))
    (per_step, per_layer, moe_extra), *_ = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)
    resid = np.array(y) - np.array(rows) @ np.array([per_step, per_layer, moe_extra])
    return {"per_step": round(float(per_step), 1), "per_layer": round(float(per_layer), 2),
            "moe_layer_extra": round(float(moe_extra), 1), "max_abs_residual_kernels": round(float(np.abs(resid).max()), 1)}


def main(argv: list[str]) -> int:
    print(split(Path(argv[0] if argv else "../shared/data/h100_steps")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
