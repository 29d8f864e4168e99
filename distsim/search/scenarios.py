"""Scenario families drawn from a space, not written by hand: train on draws from one part of the space and
judge on draws from another, so a policy that only fits its training engines shows it.

Each draw is one family's overrides (distsim.search.families): a fleet (instances, hardware, tensor
parallelism, or the P/D fleet), engine settings (max_num_seqs, KV blocks), a workload (lengths, prefix
groups and sharing, sessions, bursts, tenants) and signal staleness. The split is by engine size, the axis
the search's winners overfitted: training draws engines of at most ``SPLIT_SEQS`` sequences, held-out draws
larger ones.

**Calibration** (``--calibrate``, distsim.search.calibrate): a draw is judged by capacity, and a draw where
capacity tells nothing is redrawn. Each draw's capacity is measured for a few built-ins on one seed: if any
still meets the share at the fleet's roofline, the run is a burst too short to tell, and the draw's request
count doubles (up to ``MAX_REQUESTS``); if that is not enough, or no built-in meets the share at any rate,
the draw is dropped and another drawn, from the same seeded stream. A kept draw's load is set to its knee
(the best calibration capacity) and its size to about ``SPAN_S`` seconds of arrivals there, so the
bisection starts where policies differ and each run lasts long enough for the queue to settle.

    python -m distsim.search.scenarios --train 8 --holdout 4 --seed 0 --calibrate --out DIR
    python -m distsim.search --config-dir DIR --config-name scenarios

writes DIR/scenarios.yaml (the search's config with the drawn families and fitness=capacity; with
``--calibrate`` also DIR/calibration.csv, every draw tried and its built-ins' capacities) and runs the
search on it.
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
REQUESTS = 600  # an uncalibrated draw's size
# Named held-out families, each a kind of scenario the search's winners failed to carry over to: sized so a
# run lasts long enough for the queue to settle (docs/guide/capacity.md) and loaded near round robin's
# capacity (the bisection finds each policy's own). The engine is vLLM's default (256 sequences, the KV
# cache the memory holds), not conf/search.yaml's small one.
ENGINE = ["cluster.engine.max_num_seqs=256", "cluster.engine.total_kv_blocks=null"]
NAMED = {
    # reasoning: half the requests chat-length answers, half long reasoning traces (median ~3,000 tokens)
    "reasoning": ["workload=default", "cluster.instances=2", *ENGINE, "workload.num_requests=2400",
                  "workload.arrival.rate_rps=3.5", "workload.tenants.count=2", "workload.tenants.shares=[1,1]",
                  "workload.tenants.profiles=[{output_tokens:{dist:lognormal,mu:5.5,sigma:0.5,min:1,max:2048}},"
                  "{output_tokens:{dist:lognormal,mu:8.0,sigma:0.35,min:256,max:16384}}]"],
    # two GPU generations (2 x H100 at TP1, 1 x A100-80G at TP2) and eight tenants with two SLO classes
    "hetero_tenants": ["cluster=heterogeneous", "cluster.instances=3", "cluster.pools.0.count=2",
                       "cluster.pools.1.count=1", *ENGINE, "workload=multi_tenant", "workload.num_requests=4000",
                       "workload.arrival.rate_rps=40"],
    # the default workload (400 shared 2,048-token system prompts) with signals scraped every 250 ms
    "stale_250ms": ["workload=default", "signals=stale_250ms", "cluster.instances=4", *ENGINE,
                    "workload.num_requests=3000", "workload.arrival.rate_rps=25"],
    # P/D: 2 prefill + 2 decode H100s
    "pd": ["workload=default", "cluster=pd_disagg", *ENGINE, "workload.num_requests=3000", "workload.arrival.rate_rps=14"],
}  # fmt: skip


def draw(rng: np.random.Generator, part: str) -> list[str]:
    """One scenario's overrides from ``part`` ("train" or "holdout") of the space, at the workload's
    nominal load and ``REQUESTS`` requests (calibration replaces both)."""
    seqs = int(rng.choice(TRAIN_SEQS if part == "train" else HOLDOUT_SEQS))
    out = [f"workload={rng.choice(WORKLOADS)}", f"signals={rng.choice(SIGNALS)}", f"workload.num_requests={REQUESTS}"]
    if rng.random() < 0.2:
        out.append("cluster=pd_disagg")
    else:
        out += [f"cluster.instances={int(rng.integers(2, 7))}", f"cluster.hardware={rng.choice(['H100', 'A100-80G'])}"]
        out.append(f"cluster.engine.tensor_parallel_size={int(rng.choice([1, 1, 2]))}")
    out += [f"cluster.engine.max_num_seqs={seqs}", f"cluster.engine.total_kv_blocks={int(rng.integers(3, 9)) * 1000 * max(1, seqs // 16)}"]
    out += [f"workload.input_tokens.mu={rng.uniform(5.0, 7.0):.2f}", f"workload.output_tokens.mu={rng.uniform(4.5, 6.5):.2f}"]
    return out


def families(train: int, holdout: int, seed: int) -> dict[str, dict[str, str]]:
    """``{"train": {name: overrides}, "holdout": {...}}``, the same for the same counts and seed."""
    rng = np.random.default_rng(seed)
    return {part: {f"{part}_{i}": " ".join(draw(rng, part)) for i in range(n)}
            for part, n in (("train", train), ("holdout", holdout))}  # fmt: skip


def config_yaml(drawn: dict[str, dict[str, str]], notes: dict[str, str] | None = None) -> str:
    """The search's config with the drawn families in place of conf/search.yaml's (each of those set to
    null, which drops it: a config's map merges into the one it extends) and capacity as the fitness.
    ``notes``: a comment line per family (its calibration)."""
    from distsim.config.compose import CONF_DIR

    named = yaml.safe_load((CONF_DIR / "search.yaml").read_text(encoding="utf-8"))["search"]
    search = {part: {**dict.fromkeys(named.get(part) or {}), **drawn[part]} for part in ("train", "holdout")}
    search["holdout"].update({name: " ".join(overrides) for name, overrides in NAMED.items()})
    text = yaml.safe_dump(
        {"defaults": ["search", {"override fitness": "capacity"}, "_self_"], "search": search},
        sort_keys=False, width=1000,
    )  # fmt: skip
    comments = [f"# {name}: {note}" for name, note in (notes or {}).items()]
    return "\n".join(["# drawn by distsim.search.scenarios", *comments, text])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distsim.search.scenarios", description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=8)
    ap.add_argument("--holdout", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibrate", action="store_true", help="size and load each draw, redraw degenerate ones")
    ap.add_argument("--out", type=Path, required=True, help="a folder for scenarios.yaml")
    args = ap.parse_args(argv)
    if args.train < 1 or args.holdout < 0:
        print("distsim.search.scenarios: --train must be >= 1 and --holdout >= 0", file=sys.stderr)
        return 2
    from distsim import outputs

    out = outputs.prepare_dir(args.out)
    notes = None
    if args.calibrate:
        from distsim.search.calibrate import calibrated_families

        drawn, notes, table = calibrated_families(args.train, args.holdout, args.seed, draw, echo=True)
        outputs.write_csv(out / "calibration.csv", table)
    else:
        drawn = families(args.train, args.holdout, args.seed)
    outputs.write_text(out / "scenarios.yaml", config_yaml(drawn, notes))
    print(out / "scenarios.yaml")
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim.search.scenarios", main)  # a project error, a full or closed stdout, Ctrl-C: one line
