"""Scenario families drawn from a space, not written by hand: train on draws from one part of the space and
judge on draws from another, so a policy that only fits its training engines shows it.

Each draw is one family's overrides (distsim.search.families): a fleet (instances, hardware, tensor
parallelism, or the P/D fleet), engine settings (max_num_seqs, KV blocks), a workload (lengths, prefix
groups and sharing, sessions, bursts, tenants) and signal staleness. The split is by engine size, the axis
the search's winners overfitted: training draws engines of at most ``SPLIT_SEQS`` sequences, held-out draws
larger ones. The load is the workload's nominal rate; with ``fitness=capacity`` the search finds each
scenario's own (distsim.metrics.capacity), so no draw needs its knee.

    python -m distsim.search.scenarios --train 8 --holdout 4 --seed 0 --out DIR
    python -m distsim.search --config-dir DIR --config-name scenarios fitness=capacity

writes DIR/scenarios.yaml (the search's config with the drawn families) and runs the search on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

SPLIT_SEQS = 32  # training engines run at most this many sequences; held-out engines more
TRAIN_SEQS = (8, 16, 32)
HOLDOUT_SEQS = (64, 128, 256)
WORKLOADS = ("default", "prefix_heavy", "sessions", "mmpp_burst", "multi_tenant")
SIGNALS = ("fresh", "stale_50ms", "stale_250ms")


def draw(rng: np.random.Generator, part: str) -> list[str]:
    """One scenario's overrides from ``part`` ("train" or "holdout") of the space."""
    seqs = int(rng.choice(TRAIN_SEQS if part == "train" else HOLDOUT_SEQS))
    out = [f"workload={rng.choice(WORKLOADS)}", f"signals={rng.choice(SIGNALS)}", "workload.num_requests=600"]
    if rng.random() < 0.2:
        out.append("cluster=pd_disagg")
    else:
        out += [f"cluster.instances={int(rng.integers(2, 7))}", f"cluster.hardware={rng.choice(['H100', 'A100-80G'])}"]
    out += [f"cluster.engine.max_num_seqs={seqs}", f"cluster.engine.total_kv_blocks={int(rng.integers(3, 9)) * 1000 * max(1, seqs // 16)}"]
    out += [f"workload.input_tokens.mu={rng.uniform(5.0, 7.0):.2f}", f"workload.output_tokens.mu={rng.uniform(4.5, 6.5):.2f}"]
    return out


def families(train: int, holdout: int, seed: int) -> dict[str, dict[str, str]]:
    """``{"train": {name: overrides}, "holdout": {...}}``, the same for the same counts and seed."""
    rng = np.random.default_rng(seed)
    return {part: {f"{part}_{i}": " ".join(draw(rng, part)) for i in range(n)}
            for part, n in (("train", train), ("holdout", holdout))}  # fmt: skip


def config_yaml(train: int, holdout: int, seed: int) -> str:
    """The search's config with the drawn families in place of conf/search.yaml's (each of those set to
    null, which drops it: a config's map merges into the one it extends)."""
    from distsim.config.compose import CONF_DIR

    drawn = families(train, holdout, seed)
    named = yaml.safe_load((CONF_DIR / "search.yaml").read_text(encoding="utf-8"))["search"]
    search = {part: {**dict.fromkeys(named.get(part) or {}), **drawn[part]} for part in ("train", "holdout")}
    return "# drawn by distsim.search.scenarios\n" + yaml.safe_dump(
        {"defaults": ["search", "_self_"], "search": search}, sort_keys=False, width=1000
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distsim.search.scenarios", description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=8)
    ap.add_argument("--holdout", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="a folder for scenarios.yaml")
    args = ap.parse_args(argv)
    if args.train < 1 or args.holdout < 0:
        print("distsim.search.scenarios: --train must be >= 1 and --holdout >= 0", file=sys.stderr)
        return 2
    from distsim import outputs

    out = outputs.prepare_dir(args.out)
    outputs.write_text(out / "scenarios.yaml", config_yaml(args.train, args.holdout, args.seed))
    print(out / "scenarios.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
