"""The all-reduce model's terms (distsim/instance/latency/allreduce.py), fitted on public H100 profiles,
with each fit's error against the profile's points; writes docs/data/allreduce_fit.json.

- vLLM's custom all-reduce: docs/data/vllm_custom_allreduce_h100.csv (world sizes 2/4/8, 512 B-1 MiB,
  from sglang PR #2904), least squares of the relative error of
  ``fixed + two_shot [two-shot] + peer bytes / peer_bw`` (peer bytes: (n - 1) S one-shot, 2 (n - 1) / n S
  two-shot; the path by vLLM's thresholds).
- NCCL's ring: Vidur's h100_dgx_all_reduce.csv (../shared/data/vidur_h100_profiles/network; workers
  2/4/8), medians of the messages of 8-64 MiB (the sizes vLLM sends NCCL on NVLink; below 1 MiB the
  profile scatters between 7 and 48 us), least squares of the relative error of
  ``fixed + per_step (n - 1) + 2 (n - 1) / n S / bus``.
- NCCL over PCIe: the pairwise-NVLink box's 4-GPU rows (which cross PCIe), affine by size over 8-64 MiB.

    python scripts/allreduce_fit.py [--shared ../shared/data] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from distsim.fidelity.collectives import (  # noqa: E402  (the fit a user's GPU profile shares)
    MIB,
    NCCL_BAND,
    ring_fit,  # noqa: E402
)
from distsim.fidelity.collectives import errors as _errors  # noqa: E402
from distsim.fidelity.collectives import relative_lstsq as _relative_lstsq  # noqa: E402
from distsim.instance.latency.allreduce import H100_LINK_GBPS  # noqa: E402

CUSTOM_CSV = ROOT / "docs" / "data" / "vllm_custom_allreduce_h100.csv"
OUT = ROOT / "docs" / "data" / "allreduce_fit.json"


def one_shot(world: int, nbytes: float) -> bool:
    """vLLM's one-shot test (csrc/custom_all_reduce.cuh): two GPUs, or below 512 KiB at <= 4, 256 KiB at <= 8."""
    return world == 2 or (world <= 4 and nbytes < 512 * 1024) or (world <= 8 and nbytes < 256 * 1024)


def custom_fit(csv: Path = CUSTOM_CSV) -> dict:
    d = pd.read_csv(csv, comment="#")
    n, s, y = d["world_size"].to_numpy(float), d["bytes"].to_numpy(float), d["latency_us"].to_numpy(float)
    one = np.array([one_shot(int(a), b) for a, b in zip(n, s)])
    peer_bytes = np.where(one, (n - 1) * s, 2 * (n - 1) / n * s)
    design = np.c_[np.ones_like(y), (~one).astype(float), peer_bytes]
    fixed, two_shot, per_byte = _relative_lstsq(design, y)
    pred = design @ np.array([fixed, two_shot, per_byte])
    return {
        "fixed_us_outside_graph": round(float(fixed), 3), "two_shot_us": round(float(two_shot), 3),
        "peer_gbps": round(1e-3 / float(per_byte), 2), "error": _errors(pred, y),
        "error_by_world_size": {int(w): _errors(pred[n == w], y[n == w]) for w in sorted(set(n))},
    }


def _medians(csv: Path) -> pd.DataFrame:
    d = pd.read_csv(csv)
    d = d[d["rank"] == 0]
    return d.assign(us=d["time_stats.all_reduce.median"] * 1e3)[["num_workers", "size", "us"]]


def nccl_ring_fit(csv: Path) -> dict:
    d = _medians(csv)
    band = d[(d["size"] >= NCCL_BAND[0]) & (d["size"] <= NCCL_BAND[1])]
    n, s, y = band["num_workers"].to_numpy(float), band["size"].to_numpy(float), band["us"].to_numpy(float)
    ring = ring_fit(n, s, y, H100_LINK_GBPS)
    fixed, per_step, per_byte = ring.coefficients
    coef = np.array(ring.coefficients)
    mid = d[(d["size"] >= MIB) & (d["size"] < NCCL_BAND[0])]
    nm, sm, ym = mid["num_workers"].to_numpy(float), mid["size"].to_numpy(float), mid["us"].to_numpy(float)
    pred_mid = np.c_[np.ones_like(ym), nm - 1, 2 * (nm - 1) / nm * sm] @ coef
    return {
        "fixed_us": round(float(fixed), 2), "per_step_us": round(float(per_step), 3),
        "bus_gbps": round(1e-3 / float(per_byte), 1), "error": ring.error,
        "error_by_workers": ring.error_by_tp,
        "error_1_to_8_mib_extrapolated": _errors(pred_mid, ym),
    }


def nccl_pcie_fit(csv: Path) -> dict:
    d = _medians(csv)
    g = d[(d["num_workers"] == 4) & (d["size"] >= NCCL_BAND[0]) & (d["size"] <= NCCL_BAND[1])]
    slope, fixed = np.polyfit(g["size"].to_numpy(float), g["us"].to_numpy(float), 1)
    pred = fixed + slope * g["size"].to_numpy(float)
    return {"fixed_us": round(float(fixed), 1), "algbw_gbps": round(1e-3 / float(slope), 1), "error": _errors(pred, g["us"].to_numpy(float))}


def fit(shared: Path) -> dict:
    net = shared / "vidur_h100_profiles" / "network"
    return {
        "command": "python scripts/allreduce_fit.py",
        "custom_all_reduce": custom_fit(),
        "nccl_ring_nvlink": nccl_ring_fit(net / "h100_dgx_all_reduce.csv"),
        "nccl_pcie": nccl_pcie_fit(net / "h100_pairwise_nvlink_all_reduce.csv"),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path("..") / "shared" / "data")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    out = fit(args.shared)
    text = json.dumps(out, indent=2) + "\n"
    print(text, end="")
    if not args.no_write:
        OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
