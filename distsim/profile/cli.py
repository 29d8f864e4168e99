"""``python -m distsim.profile``: profile a model's engine steps on this machine's device and write
step tables that ``python -m distsim.calibrate steps`` reads and fits.

    python -m distsim.profile --model llama-3.1-8b --out my_gpu/ [--backend torch] [--tp N] [--layers N]
        [--grid full|tiny] [--target-ms MS] [--max-minutes M] [--no-operators] [--cpu-ranks N] [--fit]

``--backend torch`` (the default) needs the optional extra (``pip install 'distsim[profile]'``) and uses
the GPU when there is one; ``--backend numpy`` times numpy on the CPU (``--cpu-ranks N``: its
all-reduce table over N processes). ``--fit`` then runs
``calibrate steps OUT --fit --out OUT/fit``. A user's mistake is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from distsim import outputs
from distsim.errors import UserError

PROG = "python -m distsim.profile"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    from distsim.profile.grid import GRIDS

    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a catalog model or a path to a config.json (dense, or MoE in every layer)")
    p.add_argument("--out", required=True, help="the folder to write the tables into")
    p.add_argument("--backend", default="torch", help="torch (CUDA when present, else the CPU) or numpy (the CPU)")
    p.add_argument("--tp", type=int, default=1, help="time one GPU's shard of tensor parallelism TP (default 1)")
    p.add_argument("--layers", type=int, default=None, help="layers to build (default all; fewer for a model too large for one GPU)")
    p.add_argument("--grid", default="full", choices=GRIDS, help="the step sets (default full: those of ../shared/data/h100_steps)")
    p.add_argument("--target-ms", type=float, default=200.0, help="time spent repeating each measurement (default 200)")
    p.add_argument("--max-minutes", type=float, default=10.0, help="start no measurement after this (default 10)")
    p.add_argument("--no-operators", action="store_true", help="only the step tables, not the micro_*.csv operator tables")
    p.add_argument("--cpu-ranks", type=int, default=1, help="numpy backend: time the all-reduce over N CPU processes (default 1: none)")
    p.add_argument("--fit", action="store_true", help="then fit the step model: calibrate steps OUT --fit --out OUT/fit")
    ns = p.parse_args(argv)
    if ns.tp < 1 or ns.cpu_ranks < 1 or (ns.layers is not None and ns.layers < 1):
        p.error("--tp, --layers and --cpu-ranks must be at least 1")
    if ns.cpu_ranks > 1 and ns.backend != "numpy":
        p.error("--cpu-ranks goes with --backend numpy (the torch backend's all-reduce runs over the GPUs it sees)")
    if not ns.target_ms > 0 or not ns.max_minutes > 0:
        p.error("--target-ms and --max-minutes must be positive")
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = parse_args(argv)
    command = f"{PROG} " + shlex.join(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        from distsim.catalog import load_model
        from distsim.catalog.models import model_config
        from distsim.profile.backend import make_backend
        from distsim.profile.grid import grid_named
        from distsim.profile.run import profile
        from distsim.profile.tables import write_profile

        model = load_model(ns.model, "--model")
        config = model_config(ns.model, "--model")
        out = outputs.prepare_dir(ns.out)
        backend = make_backend(ns.backend)
        if ns.cpu_ranks > 1:
            backend.ranks = ns.cpu_ranks
        layers = ns.layers or model.num_layers
        result = profile(backend, model, ns.tp, layers, grid_named(ns.grid), ns.target_ms / 1e3, ns.max_minutes * 60, not ns.no_operators, say)
        if not result.steps:
            raise UserError(f"no step of the {ns.grid} grid fits in {result.device.name}'s free memory: fewer --layers")
        graphs = bool(getattr(backend, "graphs", False))
        stem = write_profile(result, out, model.name, config, model.num_layers, ns.tp, ns.backend, graphs, command, ns.grid, ns.target_ms / 1e3)
    except UserError as err:
        print(f"distsim.profile: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out / (stem + '.csv')} ({len(result.steps)} steps on {result.device.name}, {result.seconds:.0f} s)")
    for line in result.skipped:
        print(f"not measured: {line}")
    if not ns.fit:
        print(f"fit it: python -m distsim.calibrate steps {shlex.quote(str(out))} --fit --out {shlex.quote(str(Path(out) / 'fit'))}")
        return 0
    from distsim.fidelity.steps import cli as steps

    return steps.main([str(out), "--fit", "--out", str(Path(out) / "fit")], prog="python -m distsim.calibrate steps")
