"""The NCCL all-reduce fits the serving layer uses (distsim/instance/latency/serving.py), from Vidur's
H100 network profiles (../shared/data/vidur_h100_profiles/network): per worker count, least squares of
the median time against the message size over messages of 8-64 MiB (the bandwidth-bound part; below it
the profiles scatter between 7 and 48 us), as (fixed us, algorithm bandwidth GB/s).

    python scripts/nccl_profiles.py [FOLDER]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

MIB = 1024 * 1024


def fits(csv: Path) -> dict[int, tuple[float, float]]:
    d = pd.read_csv(csv)
    d = d[d["rank"] == 0]
    out = {}
    for workers, g in d.groupby("num_workers"):
        g = g[(g["size"] >= 8 * MIB) & (g["size"] <= 64 * MIB)]
        slope, fixed = np.polyfit(g["size"].to_numpy(float), g["time_stats.all_reduce.median"].to_numpy(float) * 1e3, 1)
        out[int(workers)] = (round(float(fixed), 1), round(1e-3 / float(slope), 1))
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "../shared/data/vidur_h100_profiles/network")
    for name in ("h100_dgx_all_reduce.csv", "h100_pairwise_nvlink_all_reduce.csv"):
        print(name, {w: {"fixed_us": f, "algbw_gbps": b} for w, (f, b) in fits(folder / name).items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
