"""``python -m distsim.calibrate RUN_DIR... [--model roofline3|roofline|linear] [--out PROFILE]``: fit a latency model.

Fits the free coefficients of the chosen latency model (roofline3, the shipped model, by default:
compute_efficiency, memory_efficiency, layer_overhead_us, every other term at its shipped value;
roofline: compute_efficiency, memory_efficiency, step_overhead_us; linear: base_us,
per_prefill_token_us, per_decode_token_us) by
replaying the runs and minimising the simulated-vs-measured error (distsim.fidelity.fit), then writes
a latency profile that ``cluster.latency.profile=PATH`` (or a shipped NAME) loads. Arguments with
``=`` are simulator overrides, applied to every run.

One command for the calibration pipeline, by subcommand (each the module named, same arguments):

    python -m distsim.calibrate steps FOLDER ...      # the kernels on step tables (distsim.fidelity.steps)
    python -m distsim.calibrate runs FOLDER ...       # the serving and front-end terms on a suite of runs,
                                                      # the kernels frozen (distsim.fidelity.runfit)
    python -m distsim.calibrate residuals FOLDER ...  # where each run's error sits (distsim.fidelity.residuals)
    python -m distsim.calibrate validate RUN ...      # one run against the simulator (distsim.validate)

``python -m distsim.calibrate --suite FOLDER [--params KEY=LOW:HIGH[:log],...] [--leave-one-model-out]``
fits ONE set of config values over every run of a suite folder (``../shared/data/h100_vllm_runs``
layout: per-stage aggregates, no per-request data), each model weighing the same, and writes
``--out FILE.json`` (default multifit.json) with ``FILE.md`` beside it (distsim.fidelity.multifit).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distsim import __version__, outputs
from distsim.catalog import load_hardware, load_model
from distsim.errors import UserError
from distsim.fidelity.fit import FitResult, fit
from distsim.fidelity.metrics import comparison_json
from distsim.fidelity.multifit import cli as multifit_cli
from distsim.fidelity.readers import read_run
from distsim.fidelity.replay import replay_config
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.score import DEFAULT_WEIGHTS, REQUEST_WEIGHT
from distsim.fidelity.table import format_comparison
from distsim.instance.latency.profile import LatencyProfile


@dataclass
class Calibration:
    fit: FitResult
    profile: LatencyProfile


def _sha256(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _provenance(
    runs: Sequence[MeasuredRun], overrides: Sequence[str], budget: int, result, command: str | None
) -> dict:
    """Where a fitted profile came from: the runs (with hashes), the objective, the optimiser, the errors."""
    return {
        "runs": [
            {
                "name": r.name,
                "path": str(r.path),
                "format": r.source_format,
                "requests": len(r.requests),
                "sha256": _sha256(r.source_file),
            }
            for r in runs
        ],
        "overrides": list(overrides),
        "objective": (
            "weighted mean of |relative error| of TTFT, TPOT, E2E at mean (weight 2), p50, p90, p95, p99 "
            f"(weight 1) and of the per-request error (weight {REQUEST_WEIGHT:g}), averaged over the runs"
        ),
        "weights": DEFAULT_WEIGHTS,
        "optimizer": "cma-es (cmaes, seed 0) then Nelder-Mead polish (scipy); distsim.fidelity.optimize",
        "budget": budget,
        "evaluations": result.evaluations,
        "start": {"coefficients": result.start, "objective": round(result.start_objective, 6)},
        "objective_value": round(result.objective, 6),
        "errors_pct": {
            run: {m: v["error_pct"] for m, v in comparison_json(comp).items()}
            for run, comp in result.comparisons.items()
        },
        "command": command,
        "distsim_version": __version__,
    }


def calibrate(
    runs: Sequence[MeasuredRun],
    kind: str = "roofline3",
    overrides: Sequence[str] = (),
    *,
    budget: int = 300,
    name: str | None = None,
    command: str | None = None,
) -> Calibration:
    """Fit ``kind`` to ``runs`` and describe the result as a profile (not yet written)."""
    if budget < 1:
        raise UserError(f"calibrate: budget must be at least 1 simulation (got {budget})")
    result = fit(runs, kind, overrides, budget=budget)
    cfg = replay_config(runs[0], overrides)
    hardware = load_hardware(cfg.cluster.hardware).name
    model = load_model(cfg.cluster.model).name
    name = name or _slug(f"{hardware}-{model}-{kind}")
    provenance = _provenance(runs, overrides, budget, result, command)
    profile = LatencyProfile(
        name=name,
        kind=kind,
        coefficients={k: round(v, 6) for k, v in _every_coefficient(kind, result.coefficients).items()},
        fitted_on={
            "model": model,
            "hardware": hardware,
            "tensor_parallel_size": int(cfg.cluster.engine.tensor_parallel_size),
        },
        provenance=provenance,
    )
    return Calibration(result, profile)


def _every_coefficient(kind: str, fitted: dict[str, float]) -> dict[str, float]:
    """roofline3: the fitted coefficients with every other at its shipped value, so that a profile keeps
    giving what it was fitted with when the defaults change."""
    if kind != "roofline3":
        return dict(fitted)
    from dataclasses import asdict

    from distsim.instance.latency.roofline3 import DEFAULTS

    return {**{k: float(v) for k, v in asdict(DEFAULTS).items()}, **fitted}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m distsim.calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("args", nargs="*", help="run folders or CSV runs, and overrides (key=value)")
    parser.add_argument(
        "--model", choices=("roofline3", "roofline", "linear"), help="latency model to fit (default roofline3, the shipped model)"
    )
    parser.add_argument(
        "--out", help="profile file to write (default: ./NAME.json; --suite: ./multifit.json)"
    )
    parser.add_argument("--name", help="profile name (default: HARDWARE-MODEL-KIND)")
    parser.add_argument(
        "--budget",
        type=multifit_cli.count("simulations"),
        help="simulations per fit (default 300; --suite: evaluations, default 100)",
    )
    multifit_cli.add_arguments(parser)
    return parser


def _subcommands() -> dict[str, object]:
    from distsim import validate
    from distsim.fidelity import residuals, runfit
    from distsim.fidelity.steps import cli as steps

    return {"steps": steps.main, "runs": runfit.main, "residuals": residuals.main, "validate": validate.main}


SUBCOMMANDS = ("steps", "runs", "residuals", "validate")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:  # the pipeline's steps (module docstring)
        return _subcommands()[argv[0]](argv[1:])
    parser = _parser()
    ns = parser.parse_intermixed_args(argv)
    overrides = [a for a in ns.args if "=" in a]
    paths = [a for a in ns.args if "=" not in a]
    multifit_cli.check(parser, ns, paths)
    command = "python -m distsim.calibrate " + shlex.join(argv)
    if ns.suite is not None:
        return multifit_cli.run(ns, overrides, command)
    if not paths:
        parser.error("give at least one run (or --suite FOLDER)")
    kind, budget = ns.model or "roofline3", ns.budget or 300
    try:
        if ns.out:
            outputs.prepare_file(ns.out)  # a bad --out fails before the fit, not after it
        else:
            outputs.prepare_dir(".")
        runs = [read_run(p) for p in paths]
        cal = calibrate(runs, kind, overrides, budget=budget, name=ns.name, command=command)
        out = outputs.write_text(Path(ns.out or f"{cal.profile.name}.json"), cal.profile.to_json())
    except UserError as err:
        print(f"distsim.calibrate: {err}", file=sys.stderr)
        return 2
    f = cal.fit
    print(f"{kind}: {', '.join(f'{k}={v:.6g}' for k, v in f.coefficients.items())}")
    print(f"objective {f.objective:.4f} (start {f.start_objective:.4f}) after {f.evaluations} simulations")
    for run, comp in f.comparisons.items():
        print()
        print(format_comparison(comp, title=f"{run} (calibrated)"))
    print(f"\nwrote {out}; use it with cluster.latency.profile={out}")
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim.calibrate", main)  # a full or closed stdout, and Ctrl-C, as one line
