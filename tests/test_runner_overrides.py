"""Typed overrides: every value Hydra's grammar allows keeps its type, and its text round-trips."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from distsim.config.compose import CONF_DIR
from distsim.errors import UserError
from distsim.fidelity.replay import _overridden_keys
from distsim.runner import store
from distsim.runner.overrides import Override, expand, from_lines, joined, parse, texts
from distsim.runner.plan import plan_sweep
from distsim.runner.ranking import labels, rank_configs
from distsim.runner.rows import base_row, params
from distsim.search.evaluate import search_plan


def values(argument: str) -> list[Override]:
    """The overrides one command-line argument expands to."""
    return expand(parse([argument])[0])


def reparsed(override: Override) -> Override:
    """The override its own text parses to: the text must say exactly what the pair holds."""
    (again,) = values(override.text)
    return again


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("x='a b'", [("x='a b'", "a b")]),
        ('x="c,d"', [('x="c,d"', "c,d")]),
        ("x='it''s'", None),  # not valid Hydra: checked apart below
        ("x=[1,2]", [("x=[1,2]", (1, 2))]),
        ("x=[a,'b c']", [("x=[a,'b c']", ("a", "b c"))]),
        ("x=null", [("x=null", None)]),
        ("x=1e-3", [("x=0.001", 0.001)]),
        ("x=true,false", [("x=True", True), ("x=False", False)]),
        ("x=range(3)", [("x=0", 0), ("x=1", 1), ("x=2", 2)]),
        ("x=range(0,1,0.5)", [("x=0.0", 0.0), ("x=0.5", 0.5)]),
        ("x=1,'2',null", [("x=1", 1), ("x='2'", "2"), ("x=null", None)]),
        ("+x.y=a", [("+x.y=a", "a")]),
        ("x={a:1,b:[2]}", [("x={a:1,b:[2]}", {"a": 1, "b": (2,)})]),
        ("x=${oc.env:HOME}", [(r"x=$\{oc.env\:HOME\}", "${oc.env:HOME}")]),  # escaped, as Hydra prints it
    ],
)
def test_values_keep_their_type_and_their_text_round_trips(argument, expected):
    if expected is None:
        with pytest.raises(UserError, match="sweep error"):
            values(argument)
        return
    got = values(argument)
    assert [(o.text, o.value) for o in got] == expected
    for override in got:
        assert type(override.value) is type(dict(expected)[override.text])  # 1 is not 1.0 nor True
        again = reparsed(override)
        assert again == override and again.value == override.value and again.key == override.key


def test_glob_expands_to_the_groups_options_as_plain_strings():
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="t"):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        got = expand(parse(["policy=glob(r*,exclude=reject_all)"], parser)[0])
    assert [o.value for o in got] == ["random", "round_robin"]
    assert texts(got) == ["policy=random", "policy=round_robin"]
    assert all(reparsed(o) == o for o in got)


def test_an_override_is_immutable_and_identified_by_its_text():
    a, b = values("x=[1,2]")[0], values("x=[1, 2]")[0]
    assert a == b and hash(a) == hash(b) and a.text == "x=[1,2]"  # Hydra prints one spelling
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.value = (3,)  # type: ignore[misc]
    assert isinstance(a.value, tuple)
    assert values("~x")[0].element == "~x" and values("++x=1")[0].element == "++x"


def test_param_columns_are_numbers_from_the_pair_and_text_otherwise():
    job = plan_sweep(["a=1e-3", "b=2", "c=true", "d=null", "e='q r'", "f=[1,2]", "+g=h", "seed=1"]).jobs[0]
    assert params(job) == {
        "param.a": 0.001,
        "param.b": 2,
        "param.c": "True",
        "param.d": "null",
        "param.e": "'q r'",
        "param.f": "[1,2]",
        "param.g": "h",
    }
    assert type(params(job)["param.b"]) is int
    assert job.seed == 1 and job.config_key == "a=0.001 b=2 c=True d=null e='q r' f=[1,2] +g=h"


def test_only_an_integer_literal_is_a_seed():
    assert [j.seed for j in plan_sweep(["seed=range(2)"]).jobs] == [0, 1]
    for odd in ("seed=true", "seed=1.0", "seed='3'", "seed=${oc.env:S,1}"):
        job = plan_sweep([odd]).jobs[0]
        assert job.seed is None and job.seed_override is not None and job.config == ()


def test_resume_finds_a_job_by_the_text_of_its_pairs(tmp_path):
    args = ["+tag='a b',c", "x=[1,2]", "seed=range(2)"]
    first, again = plan_sweep(args), plan_sweep(args)
    assert [j.overrides_str for j in first.jobs] == [j.overrides_str for j in again.jobs]
    job = first.jobs[0]
    assert job.overrides_str == "+tag='a b' x=[1,2] seed=0"
    store.job_dir(tmp_path, 0).mkdir()
    store.write_result(store.job_dir(tmp_path, 0), base_row(job, policy="p"))
    assert store.finished_row(tmp_path, 0, again.jobs[0].overrides_str)["param.tag"] == "'a b'"
    assert store.finished_row(tmp_path, 0, again.jobs[1].overrides_str) is None


def test_labels_keep_a_value_with_a_space_whole():
    plan = plan_sweep(["+tag='x b','y b'", "n=1"])
    parts = plan.config_texts()
    assert labels(list(parts), parts) == {"+tag='x b' n=1": "+tag='x b'", "+tag='y b' n=1": "+tag='y b'"}
    results = pd.DataFrame(
        [{**base_row(j, policy="p", seed=0), "fitness": float(j.index)} for j in plan.jobs]
    )
    ranking = rank_configs(results, parts=parts)
    assert ranking["label"].tolist() == ["+tag='y b'", "+tag='x b'"]


def test_lines_keep_their_text_and_get_typed_values():
    got = from_lines(["sim.write_requests=false", "+x.y=1e-3", "policy.z='a=b'", "~w"])
    assert texts(got) == ["sim.write_requests=false", "+x.y=1e-3", "policy.z='a=b'", "~w"]
    assert [o.key for o in got] == ["sim.write_requests", "x.y", "policy.z", "w"]
    assert [o.value for o in got] == [False, 0.001, "a=b", None]
    assert got[0].column_value == "false" and got[1].column_value == 0.001
    with pytest.raises(UserError, match="one value"):
        from_lines(["x=1,2"])


def test_search_jobs_are_named_by_their_configs_as_written():
    plan = search_plan([["policy=weighted", "policy.w=0.5", "sim.write_requests=false"]], [3, 4])
    assert [j.overrides_str for j in plan.jobs] == [
        "policy=weighted policy.w=0.5 sim.write_requests=false seed=3",
        "policy=weighted policy.w=0.5 sim.write_requests=false seed=4",
    ]
    assert plan.jobs[1].seed == 4 and plan.jobs[1].config_key == joined(plan.jobs[0].config)


def test_replay_reads_the_users_keys_from_the_parse():
    keys = _overridden_keys(["+cluster.hardware=H100", "cluster.model='a=b'", "~cluster.pools"])
    assert keys == {"cluster.hardware", "cluster.model", "cluster.pools"}
