"""Policy search on scenario families: composition and its errors, the training score, search bounds on
the command line, the held-out table (paired, Holm within a family) and the progress line. No Ray here
(tests/test_search.py runs searches)."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from searchkit import fake_evaluate

from distsim.config.compose import CONF_DIR
from distsim.config.schema import register_schemas
from distsim.errors import ConfigError, UserError
from distsim.runner.ranking import holm
from distsim.search import holdout
from distsim.search.families import (
    SCENARIO,
    Family,
    TrainingGrid,
    family_scores,
    holdout_families,
    parse_families,
    reference_means,
    train_families,
    training_score,
)
from distsim.search.progress import SearchProgress
from distsim.search.space import SearchSpace


def search_cfg(*overrides: str):
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose("search_routing", overrides=list(overrides))


# --- families ------------------------------------------------------------------------------------------


def test_families_are_strings_or_lists_and_null_drops_one():
    fams = parse_families(
        {"a": "workload=default workload.arrival.rate_rps=6", "b": ["cluster.instances=2"], "c": None, "d": ""},
        "search.train",
    )
    assert fams == [
        Family("a", ("workload=default", "workload.arrival.rate_rps=6")),
        Family("b", ("cluster.instances=2",)),
        Family("d", ()),
    ]
    # the family's overrides, then the command line's (which win), then the policy's
    assert fams[0].config(["workload.num_requests=100"], ["policy=weighted"]) == [
        "workload=default",
        "workload.arrival.rate_rps=6",
        "workload.num_requests=100",
        "policy=weighted",
    ]


def test_the_default_search_composes_its_families_and_the_command_line_edits_them():
    s = search_cfg().search
    assert [f.name for f in train_families(s)] == ["chat", "prefix", "bursts", "tenants"]
    assert [f.name for f in holdout_families(s)] == ["mooncake", "azure", "sessions", "heavy_tail", "fleet2"]
    s = search_cfg(
        "search.train.chat='workload=default cluster.instances=2'",
        "~search.train.bursts",
        "search.train.tenants=null",
        "+search.holdout.big='cluster.instances=8'",
    ).search
    assert [(f.name, f.overrides) for f in train_families(s)][::2] == [("chat", ("workload=default", "cluster.instances=2"))]
    assert [f.name for f in train_families(s)] == ["chat", "prefix"]
    assert holdout_families(s)[-1] == Family("big", ("cluster.instances=8",))


def test_without_families_the_search_trains_and_judges_on_the_scenario():
    s = search_cfg(*(f"search.train.{n}=null" for n in ("chat", "prefix", "bursts", "tenants"))).search
    assert train_families(s) == [Family(SCENARIO, ())]
    s = search_cfg(*(f"~search.holdout.{n}" for n in ("mooncake", "azure", "sessions", "heavy_tail", "fleet2"))).search
    assert holdout_families(s) == [Family(SCENARIO, ())]
    assert holdout_families(search_cfg("search.holdout_seeds=[]").search) == []


@pytest.mark.parametrize(
    "node, key, words",
    [
        ({"a b": "cluster.instances=2"}, "search.train.a b", "family name"),
        ({"x": 3}, "search.train.x", "string of overrides"),
        ({"x": "cluster.instances"}, "search.train.x", "cluster.instances"),  # Hydra's grammar: no value
        ({"x": "cluster.instances=1,2 workload=default"}, "search.train.x", "not a sweep"),
        ({"x": "workload=default policy=round_robin"}, "search.train.x", "not policy"),
        ({"x": "seed=3"}, "search.train.x", "not seed"),
        ({"x": "search.population=3"}, "search.train.x", "not search"),
    ],
)
def test_bad_families_name_the_family(node, key, words):
    with pytest.raises(ConfigError) as info:
        parse_families(node, "search.train")
    assert info.value.key == key and words in info.value.message


def test_a_family_whose_scenario_is_wrong_is_one_line_naming_it():
    from distsim.search.driver import check_scenarios

    cfg = search_cfg("search.holdout.sessions='workload=sessions workload.arrival.rate_rps=-1'")
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        with pytest.raises(ConfigError) as info:
            check_scenarios(cfg, [], lambda ovs: compose("search_routing", overrides=ovs))
    assert info.value.key == "search.holdout.sessions" and "rate_rps" in info.value.message


def test_the_budget_counts_families():
    from distsim.search.driver import _check

    with pytest.raises(ConfigError, match="population x training families x seeds = 120"):
        _check(search_cfg("search.budget=100"))


# --- training score ------------------------------------------------------------------------------------


def test_the_training_score_is_the_mean_relative_difference_to_the_reference():
    reference = {"a": 0.5, "b": 2.0}
    scores = family_scores({"a": [0.5, 0.6], "b": [1.0, 1.0]}, reference)
    assert scores == pytest.approx({"a": 0.1, "b": -0.5})  # (0.55 - 0.5) / 0.5, (1 - 2) / 2
    assert training_score(scores) == pytest.approx(-0.2)
    assert family_scores({"a": [-1.0]}, {"a": -2.0}) == {"a": 0.5}  # higher is better whatever the sign
    assert training_score(family_scores({"a": [0.5, -math.inf], "b": [1.0]}, reference)) == -math.inf
    assert family_scores({"a": [0.5, 0.7]}, None) == pytest.approx({"a": 0.6})  # no reference: raw mean


def test_a_reference_that_cannot_normalise_is_refused():
    assert reference_means({"a": [1.0, 3.0]}, "weighted") == {"a": 2.0}
    for bad in ([0.0, 0.0], [1.0, -math.inf]):
        with pytest.raises(UserError, match="reference policy weighted .*family a.*search.reference"):
            reference_means({"a": bad}, "weighted")


def test_a_generation_is_every_candidate_on_every_family():
    grid = TrainingGrid((Family("a", ("x=1",)), Family("b", ())), ("y=2",))
    configs = grid.configs([["p=1"], ["p=2"]])
    assert configs == [["x=1", "y=2", "p=1"], ["y=2", "p=1"], ["x=1", "y=2", "p=2"], ["y=2", "p=2"]]
    assert grid.split([[1.0], [2.0], [3.0], [4.0]]) == [{"a": [1.0], "b": [2.0]}, {"a": [3.0], "b": [4.0]}]


# --- search bounds on the command line -----------------------------------------------------------------


def test_search_bounds_are_set_on_the_command_line():
    space = SearchSpace(
        search_cfg(
            "search.space.load_guard.high=32",
            "~search.space.kv_utilization",
            "search.space.load_balance=null",
            "+search.space.slo={key:policy.routing.scorers.queue_depth,type:float,low:0,high:9}",
        ).search.space
    )
    by_key = {v.key: v for v in space.variables}
    assert by_key["policy.routing.load_guard"].high == 32
    assert "policy.routing.scorers.kv_utilization" not in by_key and "policy.routing.scorers.load_balance" not in by_key
    assert by_key["policy.routing.scorers.queue_depth"].high == 9  # a later entry for a key replaces it
    # the older form (the config key as the name) still works, with ++ now that the default space has no such
    # key to merge into, and replaces the entry of the same key
    old = SearchSpace(search_cfg("++search.space={policy.routing.load_guard:{type:int,low:0,high:4}}").search.space)
    assert len(old.variables) == 5 and old.variables[-1].high == 4


@pytest.mark.parametrize(
    "override, key",
    [
        ("search.space.load_guard.low=40", "search.space.load_guard"),
        ("search.space.load_guard.high=abc", "search.space.load_guard"),
        ("search.space.load_guard.key=cluster.instances", "search.space.load_guard.key"),
        ("search.space.load_guard.type=bogus", "search.space.load_guard.type"),
    ],
)
def test_a_bad_bound_names_its_entry(override, key):
    with pytest.raises(ConfigError) as info:
        SearchSpace(search_cfg(override).search.space)
    assert info.value.key == key


# --- held-out table ------------------------------------------------------------------------------------


def test_holm_against_a_hand_computed_case():
    # sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1: 0.04, 0.06, 0.06, 0.04 -> running max 0.04, 0.06, 0.06, 0.06
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.2, 0.5]) == pytest.approx([0.4, 0.5])


def fake_results(fitness: dict[tuple[str, str], list[float]], configs, keys) -> pd.DataFrame:
    rows = []
    for config, key in zip(configs, keys):
        for seed, f in enumerate(fitness[key]):
            rows.append({"config": " ".join(config), "seed": 100 + seed, "status": "ok", "fitness": f,
                         "ttft_ms.p99": 100 * f, "tpot_ms.p99": 10 * f})  # fmt: skip
    return pd.DataFrame(rows)


def holdout_case():
    families = [Family("f1", ("workload=default",)), Family("f2", ("cluster.instances=2",))]
    policies = [("evolved", ["policy=evolved"]), ("rr", ["policy=round_robin"]), ("pa", ["policy=prefix_affinity"])]
    configs, keys = holdout.plan(families, ["x=1"], policies)
    fitness = {
        ("f1", "evolved"): [1.10, 1.20, 1.30, 1.40],
        ("f1", "rr"): [1.00, 1.10, 1.20, 1.30],  # 0.1 below on every seed: p = 0 whatever Holm does
        ("f1", "pa"): [1.09, 1.22, 1.28, 1.41],  # noise around the evolved policy
        ("f2", "evolved"): [0.50, 0.60, 0.70, 0.80],
        ("f2", "rr"): [0.60, 0.71, 0.79, 0.90],  # better than evolved
        ("f2", "pa"): [0.40, 0.50, 0.60, 0.70],
    }
    return families, configs, keys, fake_results(fitness, configs, keys)


def test_the_held_out_table_is_paired_by_seed_with_holm_within_each_family():
    families, configs, keys, results = holdout_case()
    assert configs[0] == ["workload=default", "x=1", "policy=evolved"]
    table = holdout.compare_families(results, configs, keys, "evolved").set_index(["family", "policy"])
    f1_rr, f1_pa = table.loc[("f1", "rr")], table.loc[("f1", "pa")]
    assert f1_rr["diff"] == pytest.approx(0.1) and f1_rr["p_value"] < 1e-6 and f1_rr["verdict"] == "better"
    assert f1_rr["rel_diff"] == pytest.approx(0.1 / 1.15)
    # Holm over the family's two built-ins: the larger p-value times 1, the smaller times 2
    assert f1_pa["p_holm"] == pytest.approx(max(f1_pa["p_value"], 2 * f1_rr["p_value"]))
    assert f1_pa["verdict"] == "tied" and f1_pa["best_builtin"] and not f1_rr["best_builtin"]
    f2_rr = table.loc[("f2", "rr")]
    assert f2_rr["verdict"] == "worse" and f2_rr["best_builtin"] and f2_rr["rel_diff"] < 0
    assert table.loc[("f2", "evolved"), "ttft_p99_ms"] == pytest.approx(65.0)
    assert math.isnan(table.loc[("f1", "evolved"), "p_holm"])
    summary = holdout.summary(table.reset_index())
    assert summary[["family", "best_builtin", "verdict"]].values.tolist() == [["f1", "pa", "tied"], ["f2", "rr", "worse"]]
    text = holdout.format_table(table.reset_index(), families, [100, 101, 102, 103])
    assert "family f1: workload=default" in text and "pa (best built-in)" in text and "better" in text


def test_a_failed_built_in_has_no_figures_but_keeps_its_row():
    families, configs, keys, results = holdout_case()
    results.loc[results["config"].str.contains("round_robin"), "status"] = "failed"
    table = holdout.compare_families(results, configs, keys, "evolved")
    rr = table[table["policy"] == "rr"]
    assert (rr["n"] == 0).all() and rr["p_value"].isna().all() and (rr["verdict"] == "tied").all()


# --- progress line -------------------------------------------------------------------------------------


def test_the_progress_line_counts_jobs_and_ignores_resumed_ones_for_the_eta():
    ticks = iter([0.0, 30.0, 90.0, 150.0])
    stream = io.StringIO()
    progress = SearchProgress(4, 40, later_jobs=20, stream=stream, clock_fn=lambda: next(ticks))
    first = progress.generation_done("best training score +0.0100", resumed=40)  # found on disk
    assert first == "search: generation 1/4  best training score +0.0100  jobs 40/160 (40 resumed)  elapsed 0:30  ETA ?"
    second = progress.generation_done("best training score +0.0200")
    # 40 jobs simulated in 60 s; 80 training jobs and 20 held-out jobs left: 150 s
    assert second == "search: generation 2/4  best training score +0.0200  jobs 80/160 (40 resumed)  elapsed 1:30  ETA 2:30"
    assert stream.getvalue().splitlines() == [first, second]


# --- the whole loop, on a fake evaluator ---------------------------------------------------------------


def test_the_loop_runs_every_candidate_on_every_family_and_reports_progress(tmp_path, capsys, monkeypatch):
    from distsim.search import driver
    from distsim.search.driver import run_search

    made = []
    monkeypatch.setattr(driver, "SearchProgress", lambda *a, **k: made.append(SearchProgress(*a, **k)) or made[-1])

    cfg = search_cfg("search.algorithm=cmaes", "search.objectives=fitness", "search.population=4", "search.generations=2", "search.train_seeds=[0,1]",
                     "search.holdout_seeds=[7,8]", "search.baselines=[round_robin]")  # fmt: skip
    calls = []
    result = run_search(cfg, tmp_path, ["cluster.instances=2"], evaluate=fake_evaluate(calls))
    # the reference once, then one sweep per generation (4 candidates x 4 families), then the held-out sweep
    assert [c[:2] for c in calls[:3]] == [("reference", 4), ("gen_000", 16), ("gen_001", 16)]
    assert calls[3][0].startswith("holdout_") and calls[3][1:] == (2 * 5, [7, 8])
    table = result.candidates
    assert len(table) == 2 * 4 * 4 * 2 and list(table["family"].unique()) == ["chat", "prefix", "bursts", "tenants"]
    assert result.best_train_fitness == table["train_score"].max()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("search: generation")]
    assert len(lines) == 2 and lines[0].startswith("search: generation 1/2  best training score ")
    assert "jobs 32/64" in lines[0] and "ETA " in lines[0]
    assert made[0].later_jobs == (1 + 1) * 5 * 2  # the ETA counts the held-out jobs: 2 policies x 5 families x 2 seeds
    assert set(result.holdout["family"]) == {"mooncake", "azure", "sessions", "heavy_tail", "fleet2"}


def test_the_progress_line_shows_the_best_score_yet(tmp_path, capsys):
    """A second generation worse than the first does not lower the best the progress line shows."""
    from distsim.search.driver import run_search

    inner = fake_evaluate([])

    def evaluate(configs, seeds, sweep):
        results = inner(configs, seeds, sweep)
        if sweep.name == "gen_001":
            results["fitness"] = 0.1
        return results

    cfg = search_cfg("search.algorithm=cmaes", "search.objectives=fitness", "search.population=4", "search.generations=2",
                     "search.holdout_seeds=[]")  # fmt: skip
    table = run_search(cfg, tmp_path, [], evaluate=evaluate).candidates
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("search: generation")]
    best = f"best training score {table[table['generation'] == 0]['train_score'].max():+.4f}"
    assert best in lines[0] and best in lines[1]
