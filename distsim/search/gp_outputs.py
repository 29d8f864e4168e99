"""What a GP or multi-objective search writes besides the driver's outputs: the winner as a readable
Python module (policy/<name>.py, beside its YAML) and the Pareto front (pareto.csv, pareto.png) with the
baselines' points on the same axes, the baselines run on the same training families and seeds."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from distsim import outputs
from distsim.policies.expression.codegen import module_source
from distsim.policies.expression.tree import parse
from distsim.search import objectives as objs
from distsim.search.families import Reference, TrainingGrid, family_scores, training_score
from distsim.search.gp import EXPRESSION_KEY

Evaluate = Callable[[list[list[str]], list[int], Path], pd.DataFrame]


def write_module(out: Path, name: str, expression: str, policy_yaml: Path) -> Path:
    """policy/<name>.py: the expression as plain numpy code and a router class using it."""
    header = (
        f"# Evolved by python -m distsim.search (search.algorithm=gp). Runs as the expression router through\n"
        f"# {policy_yaml.name} beside this file: python -m distsim hydra.searchpath=[file://{out.resolve()}] "
        f"policy={name}\n"
    )
    return outputs.write_text(policy_yaml.with_suffix(".py"), module_source(parse(expression), name, header))


def write_pareto(
    s: DictConfig,
    out: Path,
    table: pd.DataFrame,
    names: Sequence[str],
    grid: TrainingGrid,
    reference: Reference,
    evaluate: Evaluate,
) -> pd.DataFrame:
    """pareto.csv and pareto.png: every candidate's objectives over the training families (relative to the
    reference per family, distsim.search.objectives; on_front: on the search's first front), and each
    baseline's, run on the same families and seeds and made relative the same way (covered: some candidate
    is at least as good on every objective)."""
    cands = objs.candidate_points(table, names).drop_duplicates("overrides")
    signs = np.array(objs.weights(names))
    cands["on_front"] = objs.first_front(cands[list(names)].to_numpy(), signs)
    cands.insert(0, "kind", "candidate")
    exprs = table.drop_duplicates("overrides").set_index("overrides").get(EXPRESSION_KEY)
    cands["label"] = cands["overrides"].map(exprs) if exprs is not None else cands["overrides"]
    frame = cands
    if s.baselines:
        seeds = [int(x) for x in s.train_seeds]
        policies = [[f"policy={b}", "sim.write_requests=false"] for b in s.baselines]
        runs = grid.run(policies, seeds, out / "baselines_train", evaluate, names)
        base = pd.DataFrame([dict(zip(names, objs.across_families(m, names, reference.objectives))) for m in runs.metrics])
        base.insert(0, "kind", "baseline")
        base["train_score"] = [training_score(family_scores(f, reference.fitness)) for f in runs.fitness]
        base["label"] = list(s.baselines)
        points = cands[list(names)].to_numpy() * signs
        base["covered"] = [bool(np.any(np.all(points >= row * signs, axis=1))) for row in base[list(names)].to_numpy()]
        frame = pd.concat([cands, base], ignore_index=True)
        frame[["generation", "candidate"]] = frame[["generation", "candidate"]].astype("Int64")
    outputs.write_csv(out / "pareto.csv", frame)
    plot_pareto(frame, names, out / "pareto.png", None if reference.objectives is None else str(s.reference))
    return frame


def plot_pareto(frame: pd.DataFrame, names: Sequence[str], path: Path, reference: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(itertools.combinations(names, 2)) or [(names[0], names[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4.2), squeeze=False)
    cands = frame[frame["kind"] == "candidate"]
    front = cands[cands["on_front"].astype(bool)]
    base = frame[frame["kind"] == "baseline"]
    for ax, (x, y) in zip(axes[0], pairs):
        ok = cands[(cands[x].abs() < objs.WORST) & (cands[y].abs() < objs.WORST)]
        ax.scatter(ok[x], ok[y], s=10, alpha=0.35, color="grey", label="candidates")
        ax.scatter(front[x], front[y], s=22, color="tab:red", label="first front (all objectives)")
        for _, row in base.iterrows():
            ax.scatter(row[x], row[y], marker="s", s=30, color="black")
            ax.annotate(row["label"], (row[x], row[y]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        _zoom(ax, pd.concat([front, base]), x, y)
        unit = "" if reference is None else f" vs {reference}, mean over families"
        ax.set_xlabel(x + unit)
        ax.set_ylabel(y + unit)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("training families and seeds; squares: built-in policies (axes span the front and them)")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=120)
    plt.close(fig)


def _zoom(ax, shown: pd.DataFrame, x: str, y: str) -> None:
    """Axes around the front and the baselines (far worse candidates would squeeze them into a corner)."""
    for col, set_lim in ((x, ax.set_xlim), (y, ax.set_ylim)):
        values = shown[col][shown[col].abs() < objs.WORST]
        if len(values):
            lo, hi = float(values.min()), float(values.max())
            pad = (hi - lo) * 0.15 or abs(hi) * 0.05 or 1.0
            set_lim(lo - pad, hi + pad)
