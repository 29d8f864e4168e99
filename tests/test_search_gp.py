"""GP policy search: typed operators within their limits, replay, NSGA-II's front, settings refused with
the key, and a tiny search that is deterministic, resumes identically and writes its outputs."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deap import gp
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workkit import call_budget

from distsim.config.compose import CONF_DIR
from distsim.config.schema import register_schemas
from distsim.errors import ConfigError, UserError
from distsim.policies.expression.grammar import Num
from distsim.policies.expression.tree import check_types, emit, parse
from distsim.search.driver import _check, run_search
from distsim.search.evaluate import make_evaluator
from distsim.search.gp import (
    EXPRESSION_KEY,
    MAX_HEIGHT,
    MAX_INIT_HEIGHT,
    MAX_SIZE,
    GPOptimizer,
    GPSettings,
    to_node,
)
from distsim.search.objectives import across_families, first_front, means, reference_objectives

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_requests=120", "cluster.instances=2", "workload.arrival.rate_rps=40"]
LIMITS = GPSettings(max_height=5, max_size=15, init_max_height=3, seeds=("-(queue_depth + running + in_transit)",))


def _typed(tree: gp.PrimitiveTree) -> bool:
    """Every primitive's arguments have the types it takes (walking DEAP's prefix order)."""
    def walk(i: int, want) -> int:
        node = tree[i]
        assert node.ret is want, (emit(to_node(tree)), node.name)
        i += 1
        for arg_type in getattr(node, "args", []):
            i = walk(i, arg_type)
        return i

    return walk(0, tree[0].ret) == len(tree)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.sampled_from([(1.0,), (-1.0, -1.0)]))
def test_gp_offspring_keep_types_and_size_limits(seed, weights):
    opt = GPOptimizer(8, seed, LIMITS, weights)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        asked = opt.ask()
        assert len(asked) == 8 and len({p[EXPRESSION_KEY] for _, p in asked}) == 8  # new expressions only
        for ind, point in asked:
            assert _typed(ind)
            assert ind.height <= LIMITS.max_height and len(ind) <= LIMITS.max_size
            node = parse(point[EXPRESSION_KEY])
            check_types(node, Num)
            assert node == to_node(ind)
        opt.tell([(h, tuple(rng.random(len(weights)))) for h, _ in asked])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_crossover_and_mutation_alone_keep_types_and_limits(seed):
    opt = GPOptimizer(4, 0, LIMITS)
    random.seed(seed)
    a = opt.individual(parse("scale(queue_depth) * 2 + (kv_use if has_prefix and running > 1 else 0.5)"))
    b = opt.individual(parse("min(prefix_tokens, outstanding) - above_min(in_transit)"))
    for _ in range(20):
        a, b = opt.mate(a, b)
        a = random.choice(opt.mutations)(a)[0]
        for t in (a, b):
            assert _typed(t) and t.height <= LIMITS.max_height and len(t) <= LIMITS.max_size


def test_gp_replays_for_a_seed_and_leaves_random_alone():
    random.seed(123)
    state = random.getstate()
    runs = []
    for _ in range(2):
        opt, seq = GPOptimizer(6, 5, LIMITS, (-1.0, -1.0)), []
        for gen in range(3):
            asked = opt.ask()
            seq.append([p[EXPRESSION_KEY] for _, p in asked])
            opt.tell([(h, (float(i % 3), float(gen - i))) for i, (h, _) in enumerate(asked)])
        runs.append(seq)
    assert runs[0] == runs[1]
    assert random.getstate() == state


def test_first_front_on_a_hand_built_set():
    pts = np.array([[1, 5, 1], [2, 2, 1], [5, 1, 1], [2, 3, 1], [6, 6, 6], [1, 5, 1], [3, 3, 0.5]])
    assert first_front(pts, (-1, -1, -1)).tolist() == [True, True, True, False, False, True, True]
    assert first_front(pts[:, :1], (1,)).tolist() == [False, False, False, False, True, False, False]


def test_nsga2_survivors_keep_the_first_front():
    opt = GPOptimizer(4, 0, LIMITS, (-1.0, -1.0))
    asked = opt.ask()
    values = [(1.0, 4.0), (4.0, 1.0), (5.0, 5.0), (2.0, 2.0)]
    opt.tell([(h, v) for (h, _), v in zip(asked, values)])
    asked2 = opt.ask()
    opt.tell([(h, (9.0, 9.0)) for h, _ in asked2])  # every offspring dominated by the front
    kept = sorted(p.fitness.values for p in opt.parents)
    assert kept == [(1.0, 4.0), (2.0, 2.0), (4.0, 1.0), (5.0, 5.0)]


def test_a_failed_seed_makes_an_objective_worst():
    rows = [{"ttft_p99_ms": 10.0, "fitness": 0.5}, {"ttft_p99_ms": float("nan"), "fitness": 0.4}]
    assert means(rows, ["ttft_p99_ms", "fitness"]) == (1e12, 0.45)


def test_objectives_across_families_are_relative_to_the_reference_per_family():
    """A family whose TTFT is 100x another's weighs the same: each is relative to the reference there."""
    names = ["ttft_p99_ms", "cost_usd_per_mtok"]
    ref = {"slow": (1000.0, 2.0), "fast": (10.0, 1.0)}
    per_family = {
        "slow": [{"ttft_p99_ms": 800.0, "cost_usd_per_mtok": 2.0}, {"ttft_p99_ms": 1000.0, "cost_usd_per_mtok": 2.0}],
        "fast": [{"ttft_p99_ms": 11.0, "cost_usd_per_mtok": 1.5}, {"ttft_p99_ms": 11.0, "cost_usd_per_mtok": 1.5}],
    }
    ttft, cost = across_families(per_family, names, ref)
    assert ttft == pytest.approx((-0.1 + 0.1) / 2) and cost == pytest.approx((0.0 + 0.5) / 2)
    assert across_families(per_family, names, None) == pytest.approx((455.5, 1.75))  # no reference: plain means
    per_family["fast"][1]["ttft_p99_ms"] = float("nan")  # one failed run: the worst on every objective
    assert across_families(per_family, names, ref) == (1e12, 1e12)
    with pytest.raises(UserError, match="reference policy weighted"):
        reference_objectives({"x": [{"ttft_p99_ms": 0.0, "cost_usd_per_mtok": 1.0}]}, names, "weighted")


def test_the_progress_line_counts_the_front_of_a_pareto_search():
    from distsim.search.driver import _front_summary

    told = [(1.0, 4.0), (4.0, 1.0), (5.0, 5.0), (2.0, 2.0)]
    assert _front_summary([0.01, -0.2], ["ttft_p99_ms", "tpot_p99_ms"], told) == "best training score +0.0100  front 3"
    assert _front_summary([0.01, -0.2], None, [0.01, -0.2]) == "best training score +0.0100"


def search_cfg(generations: int, extra=()):
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(
            "search_routing",
            overrides=[
                *SMALL, "search.algorithm=gp", "search.population=4", f"search.generations={generations}",
                "search.train_seeds=[0]", "search.holdout_seeds=[]", "runner.num_workers=2", *extra,
            ],
        )


@pytest.mark.parametrize(
    "override, key",
    [
        ("search.objectives=[ttft_p99_ms,bogus]", "search.objectives"),
        ("search.gp.seeds=['running +']", "search.gp.seeds[0]"),
        ("search.gp.max_size=2", "search.gp.max_size"),
        ("search.gp.init_max_height=20", "search.gp.init_max_height"),
        ("search.gp.max_height=25", "search.gp.max_height"),
        ("search.gp.max_height=0", "search.gp.max_height"),
        ("search.gp.max_size=1001", "search.gp.max_size"),
        ("search.gp.init_min_height=0", "search.gp.init_min_height"),
        ("search.gp.init_min_height=11", "search.gp.init_min_height"),
        ("search.gp.init_min_height=5", "search.gp.init_min_height"),  # above init_max_height 4
        ("search.gp.max_height=3", "search.gp.init_max_height"),  # below init_max_height 4
    ],
)
def test_bad_gp_settings_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        _check(search_cfg(1, [override]))
    assert err.value.key == key


def test_the_largest_allowed_trees_make_a_first_generation_in_seconds():
    settings = GPSettings(max_height=MAX_HEIGHT, max_size=MAX_SIZE, init_min_height=MAX_INIT_HEIGHT,
                          init_max_height=MAX_INIT_HEIGHT)
    with call_budget(2_000_000):  # work, not seconds (a clock bound fails under load): about 200,000 calls
        asked = GPOptimizer(16, 0, settings).ask()
    assert asked
    for _, point in asked:  # every emitted tree reads back within the parser's nesting limit
        assert parse(point[EXPRESSION_KEY]).height <= MAX_HEIGHT


def test_unbounded_tree_heights_are_one_config_line_at_once():
    proc = subprocess.run(
        [sys.executable, "-m", "distsim.search", "search.algorithm=gp", "search.gp.init_min_height=25",
         "search.gp.init_max_height=25", "search.gp.max_height=25"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "search.gp.max_height: must be in [1, 17] (got 25)" in proc.stderr


def test_several_objectives_need_gp():
    cfg = search_cfg(1, ["search.algorithm=cmaes", "search.objectives=[ttft_p99_ms,tpot_p99_ms]"])
    with pytest.raises(ConfigError, match="need search.algorithm=gp"):  # CMA-ES takes one fitness
        _check(cfg)


@pytest.fixture(scope="module")
def ray_session():
    from distsim.runner.session import connect

    session = connect(None)
    yield session
    session.shutdown()


def run(cfg, out):
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return run_search(cfg, out, list(SMALL), evaluate=make_evaluator(cfg.runner, config_name="search_routing"), echo=False)


PARETO = ["search.objectives=[ttft_p99_ms,tpot_p99_ms,cost_usd_per_mtok]", "search.baselines=[least_loaded,weighted]"]
# two tiny training families instead of the default four (the command line's SMALL applies to both)
FAMILIES = [
    *(f"~search.train.{name}" for name in ("chat", "prefix", "bursts", "tenants")),
    "+search.train.chat='workload=default'",
    "+search.train.prefix='workload=prefix_heavy workload.prefix.share=0.9'",
]
OBJECTIVES = ["ttft_p99_ms", "tpot_p99_ms", "cost_usd_per_mtok"]


def test_tiny_gp_search_is_deterministic_resumes_and_writes_a_runnable_policy(ray_session, tmp_path):
    """gp, NSGA-II on three objectives, two training families: resumed equals uninterrupted."""
    whole = run(search_cfg(2, [*PARETO, *FAMILIES]), tmp_path / "whole")
    run(search_cfg(1, [*PARETO, *FAMILIES]), tmp_path / "resumed")  # stopped after one generation, run again
    first = {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed" / "gen_000").rglob("summary.json")}
    resumed = run(search_cfg(2, [*PARETO, *FAMILIES]), tmp_path / "resumed")
    assert first == {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed" / "gen_000").rglob("summary.json")}
    pd.testing.assert_frame_equal(whole.candidates, resumed.candidates)
    assert whole.best_overrides == resumed.best_overrides
    table = whole.candidates
    assert len(table) == 2 * 4 * 2 and set(table["family"]) == {"chat", "prefix"} and table["on_front"].any()
    assert table[EXPRESSION_KEY].iloc[0] == "-(queue_depth + running + in_transit)"  # a seed
    front = table[table["on_front"]]  # the winner: the front's candidate of best training score
    assert whole.best_train_fitness == front["train_score"].max()
    out = tmp_path / "whole"
    pareto = pd.read_csv(out / "pareto.csv")
    assert set(pareto["kind"]) == {"candidate", "baseline"} and (out / "pareto.png").stat().st_size > 1000
    base = pareto[pareto["kind"] == "baseline"].set_index("label")
    assert base.loc["least_loaded", "covered"]  # least_loaded is a seed: matched
    # the reference (weighted) is 0 on every objective relative to itself, on the same families and seeds
    assert base.loc["weighted", OBJECTIVES].abs().max() == 0 and base.loc["weighted", "train_score"] == 0
    module = (out / "policy" / "evolved.py").read_text()
    assert f"EXPRESSION = {whole.best_overrides[0].split('=', 1)[1][1:-1]!r}" in module
    proc = subprocess.run(
        [sys.executable, "-m", "distsim", f"hydra.searchpath=[file://{out}]", "policy=evolved", *SMALL,
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize("expression", ["2048", "running", "-outstanding", "true", "0.5 * kv_use"])
def test_an_expression_override_reads_back_as_that_string(expression):
    """A bare number or YAML word would come back as a number or a bool (and a sweep's param column
    would hold two types): the override quotes it."""
    from distsim.runner.overrides import from_lines
    from distsim.search.space import SearchSpace

    (override,) = from_lines(SearchSpace.overrides({EXPRESSION_KEY: expression}))
    assert override.value == expression and override.column_value == override.shown
