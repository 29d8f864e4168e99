"""Expanding a sweep into jobs: Hydra's grammar, Hydra's order, configs and seeds, runner settings apart."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from distsim.config.compose import CONF_DIR
from distsim.errors import UserError
from distsim.runner.compose import compose_key
from distsim.runner.overrides import texts
from distsim.runner.plan import plan_sweep
from distsim.runner.rows import base_row, flatten, frame, params


def test_cartesian_product_in_hydra_order_with_configs_apart_from_seeds():
    plan = plan_sweep(["policy=round_robin,random", "seed=range(3)", "workload.num_requests=200"])
    assert len(plan.jobs) == 6
    assert [j.index for j in plan.jobs] == list(range(6))
    assert texts(plan.jobs[0].overrides) == ["policy=round_robin", "seed=0", "workload.num_requests=200"]
    assert texts(plan.jobs[1].overrides) == ["policy=round_robin", "seed=1", "workload.num_requests=200"]
    assert texts(plan.jobs[3].overrides) == ["policy=random", "seed=0", "workload.num_requests=200"]
    assert [j.seed for j in plan.jobs] == [0, 1, 2, 0, 1, 2]
    assert list(plan.configs()) == [
        "policy=round_robin workload.num_requests=200",
        "policy=random workload.num_requests=200",
    ]
    assert plan.swept_keys == ("policy", "seed")


def test_runner_and_hydra_overrides_do_not_enter_a_jobs_identity():
    plan = plan_sweep(["seed=1,2", "runner.num_workers=2", "hydra.sweep.dir=/tmp/x"])
    assert texts(plan.runner_overrides) == ["runner.num_workers=2"]
    assert [texts(j.overrides) for j in plan.jobs] == [["seed=1"], ["seed=2"]]
    assert plan.jobs[0].config == ()
    with pytest.raises(UserError, match="runner"):
        plan_sweep(["runner.num_workers=1,2"])


def test_single_job_and_non_literal_seed():
    plan = plan_sweep([])
    assert len(plan.jobs) == 1 and plan.jobs[0].overrides == () and plan.jobs[0].seed is None
    odd = plan_sweep(["seed=${oc.env:SEED,3}"]).jobs[0]
    assert odd.seed is None and compose_key(odd) == odd.overrides_str  # composed per job, never guessed


def test_glob_lists_the_groups_options_and_bad_syntax_is_one_line():
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="t"):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        plan = plan_sweep(["policy=glob(r*)"], parser)
    policies = [j.overrides[0].text for j in plan.jobs]
    assert "policy=round_robin" in policies and "policy=random" in policies
    assert all(p.startswith("policy=r") for p in policies)
    with pytest.raises(UserError, match="sweep error"):
        plan_sweep(["policy=[a,"])
    with pytest.raises(UserError, match="enumerates"):
        plan_sweep(["seed=interval(0,1)"])


def test_rows_flatten_summaries_and_type_parameters():
    assert flatten({"a": {"b": 1, "c": {"d": 2.5}}, "e": [1, 2]}) == {"a.b": 1, "a.c.d": 2.5, "e": "[1, 2]"}
    job = plan_sweep(["cluster.instances=2", "x.f=0.5", "+x.y=a", "seed=1"]).jobs[0]
    assert params(job) == {"param.cluster.instances": 2, "param.x.f": 0.5, "param.x.y": "a"}


def test_a_parameter_that_is_a_number_in_one_job_and_text_in_another_is_text(tmp_path):
    """A search's families set the KV blocks to 6000 in one and null in another: the results table still
    writes (parquet needs one type a column)."""
    from distsim import outputs

    jobs = plan_sweep(["cluster.engine.total_kv_blocks=6000,null"]).jobs
    table = frame([base_row(job) for job in jobs])
    assert list(table["param.cluster.engine.total_kv_blocks"]) == ["6000", "null"]
    outputs.write_parquet(tmp_path / "results.parquet", table)
