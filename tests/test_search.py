"""Evolutionary search: deterministic, resumable, and its emitted policy runs like a built-in."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from distsim.config.compose import CONF_DIR
from distsim.config.schema import register_schemas
from distsim.errors import ConfigError
from distsim.search.driver import run_search
from distsim.search.evaluate import make_evaluator
from distsim.search.optimizer import build_optimizer
from distsim.search.space import SearchSpace

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_requests=150", "cluster.instances=2", "workload.arrival.rate_rps=40"]
# two small training families (the command line's SMALL applies after them) and one held-out family
FAMILIES = [
    "search.train.chat='workload=default'",
    "search.train.prefix='workload=prefix_heavy'",
    "~search.train.bursts",
    "~search.train.tenants",
    *(f"~search.holdout.{name}" for name in ("mooncake", "azure", "heavy_tail", "fleet2")),
]


# these tests search weights with CMA-ES on the scalar fitness (the default search is gp on three objectives)
CMAES = ["search.algorithm=cmaes", "search.objectives=fitness"]


def search_cfg(generations: int, holdout: str = "[]", baselines: str = "[]"):
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(
            "search_routing",
            overrides=[
                *SMALL,
                *FAMILIES,
                *CMAES,
                "search.population=4",
                f"search.generations={generations}",
                "search.train_seeds=[0,1]",
                f"search.holdout_seeds={holdout}",
                f"search.baselines={baselines}",
                "runner.num_workers=2",
            ],
        )


def run(cfg, out, evaluate=None):
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        evaluate = evaluate or make_evaluator(cfg.runner, config_name="search_routing")
        return run_search(cfg, out, list(SMALL), evaluate=evaluate, echo=False)


def killed_after(sweeps: int):
    """An evaluator whose driver is killed once ``sweeps`` sweeps have finished (before it tells them)."""
    inner = make_evaluator(None, config_name="search_routing")
    calls = []

    def evaluate(configs, seeds, sweep_dir):
        results = inner(configs, seeds, sweep_dir)
        calls.append(sweep_dir.name)
        if len(calls) == sweeps:
            raise KeyboardInterrupt
        return results

    return evaluate


@pytest.fixture(scope="module")
def ray_session():
    from distsim.runner.session import connect

    session = connect(None)
    yield session
    session.shutdown()


def test_search_is_deterministic_and_resumes(ray_session, tmp_path):
    whole = run(search_cfg(2), tmp_path / "whole")
    # killed after the first generation's sweep (reference/, gen_000), then run again into the same directory
    with pytest.raises(KeyboardInterrupt):
        run(search_cfg(2), tmp_path / "resumed", killed_after(2))
    first = {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed" / "gen_000").rglob("summary.json")}
    resumed = run(search_cfg(2), tmp_path / "resumed")
    again = {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed" / "gen_000").rglob("summary.json")}
    assert first and first == again  # generation 0 was not simulated again
    name = "candidates.parquet"
    assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "resumed" / name).read_bytes()
    assert whole.best_overrides == resumed.best_overrides
    assert (tmp_path / "whole" / "convergence.png").stat().st_size > 1000
    cands = whole.candidates
    assert len(cands) == 2 * 4 * 2 * 2  # generations x population x families x seeds
    assert cands["fitness"].notna().all() and set(cands["family"]) == {"chat", "prefix"}
    # the training score: the mean over families of the relative difference to the reference (weighted)
    ref = pd.read_parquet(tmp_path / "whole" / "reference" / "results.parquet")
    ref_mean = {("chat" if "workload=default" in c else "prefix"): g["fitness"].mean() for c, g in ref.groupby("config")}
    one = cands[(cands["generation"] == 1) & (cands["candidate"] == 2)]
    rel = [(g["fitness"].mean() - ref_mean[f]) / ref_mean[f] for f, g in one.groupby("family")]
    assert one["train_score"].iloc[0] == pytest.approx(sum(rel) / 2)


def test_emitted_policy_runs_with_the_cli_and_holdout_ranks_it(ray_session, tmp_path):
    out = tmp_path / "s"
    result = run(search_cfg(1, holdout="[7,8]", baselines="[round_robin]"), out)
    assert result.policy_yaml == out / "policy" / "evolved.yaml"
    assert result.holdout[["family", "policy"]].values.tolist() == [["sessions", "evolved"], ["sessions", "round_robin"]]
    assert (out / "holdout.csv").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "distsim", f"hydra.searchpath=[file://{out}]", "policy=evolved", *SMALL, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "summary.json").exists()


def test_optimizers_replay_exactly_for_a_seed():
    space = SearchSpace(
        {
            "policy.routing.scorers.queue_depth": {"type": "float", "low": 0, "high": 5},
            "policy.routing.load_guard": {"type": "int", "low": 0, "high": 8},
            "policy.admission.kind": {"type": "categorical", "choices": ["always", "slo_aware"]},
        }
    )
    for algorithm in ("cmaes", "random"):
        seqs = []
        for _ in range(2):
            opt = build_optimizer(algorithm, space, 4, seed=3)
            seq = []
            for _gen in range(3):
                asked = opt.ask()
                seq.append([space.values(p) for _, p in asked])
                opt.tell([(h, float(i)) for i, (h, _) in enumerate(asked)])
            seqs.append(seq)
        assert seqs[0] == seqs[1]


@pytest.mark.parametrize(
    "space, key",
    [
        ({}, "search.space"),
        ({"cluster.instances": {"type": "int", "low": 1, "high": 4}}, "search.space.cluster.instances"),
        ({"policy.routing.load_guard": {"type": "int", "low": 5, "high": 1}}, "search.space.policy.routing.load_guard"),
        ({"policy.admission.kind": {"type": "categorical", "choices": ["always"]}}, "search.space.policy.admission.kind"),
        ({"policy.routing.load_guard": {"type": "bogus"}}, "search.space.policy.routing.load_guard.type"),
    ],
)
def test_bad_search_spaces_name_the_key(space, key):
    with pytest.raises(ConfigError) as info:
        SearchSpace(space)
    assert info.value.key == key


MIXED_SPACE = {
    "policy.routing.scorers.queue_depth": {"type": "float", "low": 0, "high": 5},
    "policy.routing.load_guard": {"type": "int", "low": 0, "high": 8},
}
FLOAT_SPACE = {"policy.routing.scorers.queue_depth": MIXED_SPACE["policy.routing.scorers.queue_depth"]}


@pytest.mark.parametrize("space", [MIXED_SPACE, FLOAT_SPACE])
def test_a_generation_that_ranks_nothing_is_not_told(space):
    """Every candidate scoring the same (all failed, or no difference) tells CMA-ES nothing: the next
    generation is asked from the same distribution (as if not told), and numpy warns of nothing."""
    told, untold = (build_optimizer("cmaes", SearchSpace(space), 10, seed=0) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asked = told.ask()
        untold.ask()
        told.tell([(h, -1e9) for h, _ in asked])  # the search's score for a failed candidate
        asked = told.ask()
        assert [p for _, p in asked] == [p for _, p in untold.ask()]
        # more than half tied on CatCMAwM's first informative generation: told, without numpy's warnings
        told.tell([(h, f) for (h, _), f in zip(asked, [0.5] * 7 + [0.9, 0.8, 0.1])])
        assert len(told.ask()) == 10
