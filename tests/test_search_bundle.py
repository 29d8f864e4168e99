"""Bundles (distsim.search.bundle), optional parts (search.space ``when``), racing (distsim.search.race) and
the export of a winner (distsim.search.export)."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from distsim.config.compose import CONF_DIR
from distsim.errors import ConfigError, UserError
from distsim.policies.endpoint_picker import read
from distsim.search.bundle import PD_SHARE, derive, grid, read_bundle, write_bundle
from distsim.search.driver import best_row, best_values, write_best
from distsim.search.export import export
from distsim.search.race import RaceSettings, survivors, told
from distsim.search.space import SearchSpace

SPACE = {
    "admission": {"key": "policy.admission.kind", "type": "categorical", "choices": ["always", "queue_limit"]},
    "max_queued": {"key": "policy.admission.max_queued_requests", "type": "int", "low": 4, "high": 64, "when": {"admission": "queue_limit"}},
    "scheduler": {"key": "cluster.engine.scheduler", "type": "categorical", "choices": ["fcfs", "shortest_prompt"]},
    "aging": {"key": "cluster.engine.scheduler_aging_per_s", "type": "float", "low": 0, "high": 100, "when": {"scheduler": ["shortest_prompt"]}},
    "queue_depth": {"key": "policy.routing.scorers.queue_depth", "type": "float", "low": 0, "high": 5},
}


def test_a_part_whose_condition_is_unmet_sets_no_key():
    space = SearchSpace(SPACE)
    off = space.values({"policy.admission.kind": 0, "policy.admission.max_queued_requests": 9, "cluster.engine.scheduler": 0,
                        "cluster.engine.scheduler_aging_per_s": 0.5, "policy.routing.scorers.queue_depth": 0.2})  # fmt: skip
    assert off == {"policy.admission.kind": "always", "cluster.engine.scheduler": "fcfs", "policy.routing.scorers.queue_depth": 1.0}
    on = space.values({"policy.admission.kind": 1, "policy.admission.max_queued_requests": 9, "cluster.engine.scheduler": 1,
                       "cluster.engine.scheduler_aging_per_s": 0.5, "policy.routing.scorers.queue_depth": 0.2})  # fmt: skip
    assert on["policy.admission.max_queued_requests"] == 9 and on["cluster.engine.scheduler_aging_per_s"] == 50.0


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"key": "policy.x", "type": "int", "low": 0, "high": 3, "when": {"nope": "a"}}, "must name a categorical"),
        ({"key": "policy.x", "type": "int", "low": 0, "high": 3, "when": {"admission": "token_bucket"}}, "are not choices of admission"),
        ({"key": "workload.num_requests", "type": "int", "low": 0, "high": 3}, "only policy.* and the bundle's keys"),
    ],
)
def test_bad_parts_are_one_line_naming_the_entry(entry, message):
    with pytest.raises(ConfigError, match=r"search.space.x.*" + message):
        SearchSpace({**SPACE, "x": entry})


def test_the_built_in_grid_is_every_routing_queue_and_admission_at_its_defaults():
    bundles = grid({"routing": ["least_loaded", "weighted"], "scheduler": ["fcfs", "shortest_prompt"], "admission": ["always", "queue_limit"]})
    assert len(bundles) == 8
    qlimit = next(b for b in bundles if b.name == "weighted+shortest_prompt+queue_limit")
    own = OmegaConf.load(CONF_DIR / "policy" / "queue_limit.yaml").admission.max_queued_requests
    assert qlimit.overrides == ("policy=weighted", "cluster.engine.scheduler=shortest_prompt", "policy.admission.kind=queue_limit",
                                f"policy.admission.max_queued_requests={own}")  # fmt: skip
    for bad, message in (({"routing": ["nope"]}, "no conf/policy/nope.yaml"), ({"routing": ["weighted"], "scheduler": ["lifo"]}, "not one of"),
                         ({"routing": ["weighted"], "admission": ["weighted"]}, "has no admission policy")):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            grid(bad)


def test_the_p_d_share_becomes_each_fleets_pool_counts():
    assert derive(["cluster=pd_disagg"], [f"{PD_SHARE}=0.2", "a=1"]) == ["cluster.pools.0.count=1", "cluster.pools.1.count=3", "a=1"]
    assert derive(["cluster=pd_disagg", "cluster.pools.0.count=3", "cluster.pools.1.count=5"], [f"{PD_SHARE}=0.5"]) == [
        "cluster.pools.0.count=4", "cluster.pools.1.count=4"]  # fmt: skip
    assert derive(["cluster=pd_disagg"], [f"{PD_SHARE}=0.99"])[1] == "cluster.pools.1.count=1"  # one of each role at least
    assert derive(["cluster.instances=4"], [f"{PD_SHARE}=0.5"]) == []  # no P/D pools: no key


def test_a_race_keeps_the_best_share_and_tells_the_rest_below_every_survivor():
    race = [0.1, 0.5, -1e9, 0.3, 0.2, 0.4]
    keep = survivors(race, 0.5)
    assert keep == [1, 5, 3]
    values = told(race, {1: 0.45, 5: 0.02, 3: 0.3})
    assert values[1] == 0.45 and values[5] == 0.02 and values[3] == 0.3
    out = [values[i] for i in (4, 0, 2)]  # race order: 0.2, 0.1, failed
    assert max(out) < 0.02 and out == sorted(out, reverse=True)
    assert survivors([0.1, 0.2], 0.1) == [1, 0]  # at least two
    with pytest.raises(ConfigError, match="search.race.keep"):
        RaceSettings(keep=1.5).check(2)
    with pytest.raises(ConfigError, match="search.race.first"):
        RaceSettings.from_node({"keep": 0.5, "first": "policy=round_robin"}).check(2)


def _search_dir(tmp_path):
    """A search's best-so-far files as the loop writes them, from a candidates table."""
    s = OmegaConf.create({"name": "evolved", "algorithm": "cmaes", "base_policy": "weighted", "space": {
        **SPACE, "pd": {"key": PD_SHARE, "type": "float", "low": 0.1, "high": 0.9}}})  # fmt: skip
    rows = pd.DataFrame([
        {"generation": 0, "candidate": 0, "train_score": 0.3, "raced_out": False, "policy.admission.kind": "queue_limit",
         "policy.admission.max_queued_requests": 17.0, "cluster.engine.scheduler": "fcfs", "policy.routing.scorers.queue_depth": 2.5,
         "cluster.engine.scheduler_aging_per_s": float("nan"), PD_SHARE: 0.25},
        {"generation": 0, "candidate": 1, "train_score": 0.9, "raced_out": True, "policy.admission.kind": "always",
         "policy.admission.max_queued_requests": float("nan"), "cluster.engine.scheduler": "fcfs",
         "policy.routing.scorers.queue_depth": 1.0, "cluster.engine.scheduler_aging_per_s": float("nan"), PD_SHARE: 0.5},
    ])  # fmt: skip
    return s, rows


def test_the_best_is_a_fully_evaluated_candidate_with_its_types_and_only_its_parts(tmp_path):
    s, rows = _search_dir(tmp_path)
    row = best_row(s, rows, None)
    assert row["candidate"] == 0  # the raced-out candidate's higher race score does not count
    values = best_values(s, row)
    assert values["policy.admission.max_queued_requests"] == 17 and isinstance(values["policy.admission.max_queued_requests"], int)
    assert "cluster.engine.scheduler_aging_per_s" not in values
    write_best(s, tmp_path, rows, None)
    policy = yaml.safe_load((tmp_path / "policy" / "evolved.yaml").read_text())
    assert policy["admission"] == {"kind": "queue_limit", "max_queued_requests": 17}
    assert read_bundle(tmp_path / "bundle.txt") == ["cluster.engine.scheduler=fcfs", f"{PD_SHARE}=0.25"]


def test_export_writes_a_python_policy_and_an_endpoint_picker_config_with_the_same_weights(tmp_path):
    s, rows = _search_dir(tmp_path)
    write_best(s, tmp_path, rows, None)
    module, picker = export(tmp_path)
    spec = importlib.util.spec_from_file_location("evolved_bundle", module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    policy = yaml.safe_load((tmp_path / "policy" / "evolved.yaml").read_text())
    assert mod.WEIGHTS == {k: float(v) for k, v in policy["routing"]["scorers"].items() if v > 0}
    assert mod.ADMISSION_KIND == "queue_limit" and mod.ADMISSION == {"max_queued_requests": 17}
    assert mod.ENGINE == {"cluster.engine.scheduler": "fcfs", PD_SHARE: 0.25}
    from distsim.policies.base import Router

    assert issubclass(mod.EvolvedRouter, Router)
    assert read(picker).weights == mod.WEIGHTS
    assert "Not expressible here" in picker.read_text() and "admission queue_limit" in picker.read_text()
    with pytest.raises(UserError, match="holds 0 policy files"):
        export(tmp_path / "export")


def test_write_bundle_says_how_to_run_it(tmp_path):
    path = write_bundle(tmp_path, "evolved", {"cluster.engine.scheduler": "shortest_prompt", "policy.routing.load_guard": 3})
    assert "policy=evolved cluster.engine.scheduler=shortest_prompt" in path.read_text()
    assert read_bundle(path) == ["cluster.engine.scheduler=shortest_prompt"]


def _default_cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    from distsim.config.schema import register_schemas

    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose("search", overrides=list(overrides))


def test_the_default_search_races_says_what_runs_at_once_and_leaves_its_best_when_stopped(tmp_path, capsys):
    """conf/search.yaml (capacity, bundles, a race): the reference, then per generation the race on the first
    seed with its cheaper overrides and the survivors on every seed; the first line comes before any run;
    stopped in generation 2, the search has written generation 1's best."""
    from searchkit import fake_evaluate

    from distsim.search.driver import run_search

    calls: list = []
    inner = fake_evaluate(calls)

    def evaluate(configs, seeds, sweep):
        if sweep.name == "gen_001_race":
            raise KeyboardInterrupt
        return inner(configs, seeds, sweep)

    cfg = _default_cfg("search.population=4", "search.holdout_seeds=[]")
    assert cfg.fitness.kind == "capacity" and cfg.fitness.tolerance <= 0.005
    with pytest.raises(KeyboardInterrupt):
        run_search(cfg, tmp_path, [], evaluate=evaluate)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("search: training on 4 families x 2 seeds")
    families = 4
    assert [c[:3] for c in calls] == [("reference", families, [0, 1]), ("reference_race", families, [0]),
                                      ("gen_000_race", 4 * families, [0]), ("gen_000", 2 * families, [0, 1])]  # fmt: skip
    race_configs = inner.configs["gen_000_race"]
    assert all("fitness.tolerance=0.02" in c for c in race_configs)
    assert any(line.startswith("search: generation 1/6") for line in out)
    policy = yaml.safe_load((tmp_path / "policy" / "evolved.yaml").read_text())
    assert policy["routing"]["kind"] == "weighted" and (tmp_path / "bundle.txt").exists()


def test_the_command_says_what_it_does_before_checking_scenarios_and_starting_ray(tmp_path):
    from clikit import run_module

    proc = run_module("distsim.search", "+search.train.broken='workload=no_such_workload'", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[0] == "search: checking the scenarios of 5 training and 6 held-out families, then starting Ray"
    assert "search.train.broken" in proc.stderr and "Traceback" not in proc.stderr


def test_a_raced_generation_costs_its_race_and_its_survivors():
    from distsim.search.driver import _check, _generations

    cfg = _default_cfg("search.population=8", "search.budget=200")
    # the race: 8 candidates x 4 families x 1 seed; the survivors: 4 x 4 families x 2 seeds -> 64 a generation
    assert _generations(cfg.search, 4) == 3
    with pytest.raises(ConfigError, match="= 64, fewer with a race"):
        _check(_default_cfg("search.population=8", "search.budget=63"))
