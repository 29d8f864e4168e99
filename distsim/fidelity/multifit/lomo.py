"""Leave-one-model-out cross-validation of the multi-run fit (issue 17).

For each model (experiments.csv's ``model`` column), fit on the runs of every other model and replay
the held-out model's runs at the fitted values: their errors say how the coefficients do on a model
they never saw. Folds run one after another, each using the whole worker pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from distsim.errors import UserError
from distsim.fidelity.fit import Param
from distsim.fidelity.multifit.fit import Evaluation, Progress, SuiteEvaluator, SuiteFit, fit_suite
from distsim.fidelity.multifit.pool import ReplayPool
from distsim.fidelity.suite.data import Suite, SuiteRun


@dataclass
class Fold:
    """One held-out model: the fit on the others and the held-out runs at its values."""

    model: str
    fit: SuiteFit
    held_out: Evaluation


def models_of(runs: Sequence[SuiteRun]) -> list[str]:
    """The models of ``runs`` in the order they first appear."""
    return list(dict.fromkeys(r.model_name for r in runs))


def leave_one_model_out(
    suite: Suite,
    runs: Sequence[SuiteRun],
    pool: ReplayPool,
    params: Sequence[Param],
    start: dict[str, float],
    budget: int,
    progress: Progress | None = None,
    on_fold: Callable[[list[Fold]], None] | None = None,
) -> list[Fold]:
    """One :class:`Fold` per model of ``runs``, in the order the models first appear; ``on_fold`` gets
    the folds done so far after each (the command writes them, so a stopped run keeps its folds)."""
    models = models_of(runs)
    if len(models) < 2:
        raise UserError(f"--leave-one-model-out needs runs of at least two models (got {', '.join(models)})")
    folds = []
    for i, model in enumerate(models, 1):
        train = [r for r in runs if r.model_name != model]
        test = [r for r in runs if r.model_name == model]
        if progress:
            progress(
                f"fold {i}/{len(models)}: holding out {model} (runs {', '.join(r.id for r in test)}), "
                f"fitting on {len(train)} runs"
            )
        fit = fit_suite(SuiteEvaluator(suite, train, pool), params, start, budget, progress=progress)
        held_out = SuiteEvaluator(suite, test, pool)(fit.best.values)
        folds.append(Fold(model, fit, held_out))
        if on_fold:
            on_fold(folds)
    return folds
