"""The ``runs`` stage: what a GPU achieves and the serving terms, fitted on real runs toward their prior.

The engine is :func:`distsim.fidelity.runfit.fit` (bounded Gauss-Newton over the whole-run errors of
mean E2E, TTFT and ITL, each run weighted 1 / sqrt(runs of its model)); this module gives it either
kind of run: a folder laid out like ``../shared/data/h100_vllm_runs`` (its own measured aggregates) or
one or more runs with per-request times (a vLLM bench folder, a CSV run), whose measured figures are
computed from their requests by the same definition as the replay's (:mod:`distsim.fidelity.metrics`).
The GPU terms start at the shipped model's on the runs' GPU (the catalog's achieved values), unless
``--steps`` names a step fit (``step_fit.json``) or a folder of step tables to fit them on first; a fit
describes one GPU (:func:`runs_hardware`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from distsim.config.compose import load_config
from distsim.errors import UserError
from distsim.fidelity import runfit
from distsim.fidelity.metrics import metric_frame, stage_metrics
from distsim.fidelity.pool import ReplayPool
from distsim.fidelity.readers import read_run
from distsim.fidelity.replay import split_overrides
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.suite.data import Suite, parse_ids, read_suite


def is_suite(path: str | Path) -> bool:
    """A folder of runs with per-stage aggregates (it has experiments.csv)."""
    return (Path(path) / "experiments.csv").is_file()


def measured_figures(run: MeasuredRun) -> dict[tuple[int, str], float]:
    """A per-request run's measured whole-run figures, by the replay's definition."""
    table = stage_metrics(metric_frame(run.requests))
    return {(int(s), str(m)): float(v) for s, m, v in table.itertuples(index=False) if math.isfinite(v)}


def request_runs(runs: Sequence[MeasuredRun], pool: ReplayPool) -> runfit.Runs:
    """:class:`distsim.fidelity.runfit.Runs` over runs with per-request times."""
    names = [r.id for r in runs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"two runs are named {twice[0]}: give runs with different names")
    return runfit.Runs(runs, {r.id: measured_figures(r) for r in runs}, pool)


def gpu_overrides(steps: str | Path | None, overrides: Sequence[str] = ()) -> list[str]:
    """``cluster.latency.KEY=VALUE`` for the GPU terms of a step fit: ``steps`` is a step_fit.json
    (``calibrate steps --fit``) or a folder of step tables (fitted here); none without ``steps``."""
    if steps is None:
        return []
    path = Path(steps)
    if path.is_dir():
        from distsim.fidelity.steps.cli import fitted_values, run_nnls

        values = fitted_values(run_nnls(path, overrides))
    else:
        try:
            values = json.loads(path.read_text(encoding="utf-8"))["values"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"--steps {path}: not a step fit (step_fit.json) or a folder of step tables ({err})") from None
    return [f"cluster.latency.{k}={float(v)!r}" for k, v in values.items()]


def load_runs(paths: Sequence[str], pool: ReplayPool, ids: str | None = None) -> tuple[runfit.Runs, Suite | None]:
    """The runs to fit: one suite folder (``ids`` picks runs of it), or run folders and CSV runs."""
    suites = [p for p in paths if is_suite(p)]
    if suites:
        if len(paths) != 1:
            raise UserError(f"{suites[0]}: a folder of runs is fitted alone (got {len(paths)} paths)")
        suite = read_suite(suites[0])
        return runfit.Runs.of_suite(suite, pool, parse_ids(ids)), suite
    if ids is not None:
        raise UserError("--runs picks runs of a folder of runs (one with experiments.csv)")
    return request_runs([read_run(p) for p in paths], pool), None


def runs_gpus(runs: runfit.Runs, overrides: Sequence[str]) -> list[str]:
    """The catalog GPUs the runs ran on, sorted (``cluster.hardware=`` among ``overrides`` wins; a folder
    of runs: the H100)."""
    from distsim.catalog.hardware import load_hardware

    given = [o.split("=", 1)[1] for o in overrides if o.startswith("cluster.hardware=")]
    names = {given[-1]} if given else {getattr(r, "hardware", None) or "H100" for r in runs.runs}
    return sorted({load_hardware(n).name for n in names})


def runs_hardware(runs: runfit.Runs, overrides: Sequence[str], terms: Sequence[str]) -> str | None:
    """The GPU the fit describes: GPU terms describe one GPU, so fitting any of :data:`runfit.GPU_TERMS`
    on runs of two GPUs is a user error; serving terms alone may span several (then None: no one GPU)."""
    gpus = runs_gpus(runs, overrides)
    fitted = [t for t in terms if t in runfit.GPU_TERMS]
    if len(gpus) > 1 and fitted:
        raise UserError(f"runs on {' and '.join(gpus)}: GPU terms ({', '.join(fitted)}) are fitted one GPU at a "
                        "time; fit each GPU's runs apart, or pass --terms with serving terms only")
    return gpus[0] if len(gpus) == 1 else None


def fit_record(
    result: runfit.RunFit, runs: runfit.Runs, overrides: Sequence[str], command: str, gpu: Sequence[str] = (),
    paths: Sequence[str] = (), hardware: str | None = None,
) -> dict:
    """The fit as JSON: runfit's record (``overrides``: every value it was fitted under), ``data``: the
    runs' ``paths`` as given, and ``use``: the overrides that simulate with the fit, the step fit's GPU
    terms (``gpu``) and the fitted values."""
    body = runfit.to_json(result, runs, overrides, command)
    body["data"] = [str(p) for p in paths]
    body["latency_kind"] = OmegaConf.select(load_config(split_overrides(overrides)[0]), "cluster.latency.kind")
    body["skipped"] = [list(s) for s in runs.skipped]
    body["hardware"] = hardware  # the GPU the fit describes (validate --fit refuses a run on another)
    body["use"] = [*gpu, *(f"{k}={v:.6g}" for k, v in {**result.best.values, **runfit.HELD}.items())]
    return body


def check_lomo(runs: runfit.Runs) -> None:
    models = {r.model_name for r in runs.runs}
    if len(models) < 2:
        raise UserError(f"--lomo needs runs of at least two models (got {', '.join(sorted(models))})")


def fit_overrides(path: str | Path, hardware: str | None = None) -> list[str]:
    """The ``use`` overrides of a fit written by ``calibrate runs``; ``hardware``: the GPU they are for,
    refused when the fit describes another (its GPU terms and host are that GPU's)."""
    from distsim.catalog.hardware import load_hardware

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        use = data["use"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"--fit {path}: not a fit written by calibrate runs ({err})") from None
    fitted_on = data.get("hardware") if isinstance(data, dict) else None
    if hardware and fitted_on and load_hardware(hardware).name != load_hardware(fitted_on).name:
        raise UserError(f"--fit {path}: fitted on {fitted_on} runs, and this run is on {load_hardware(hardware).name}: "
                        "its GPU and host terms describe that GPU; fit this GPU's runs (calibrate runs)")
    return [str(u) for u in use]
