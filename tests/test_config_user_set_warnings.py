"""Warnings about keys set but not used speak only of keys the user set (an override, or a group option
they chose); values inherited from the shipped configs never warn. The default config and every option
of every config group under conf/ (and conf/search.yaml with its scenario families) validate without a
warning: pytest makes any ConfigWarning fail (pyproject.toml); the runs themselves are in
tests/test_every_config_option.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from clikit import ROOT, run_module

from distsim import load_config
from distsim.errors import ConfigWarning
from distsim.resolve import resolve

TRACE = ROOT.parent / "shared" / "data" / "azure" / "AzureLLMInferenceTrace_code.csv"
AS_TRACE = ["workload.kind=trace", "workload.format=azure", f"workload.path={TRACE}", "workload.max_rows=50"]
GROUPS = ("cluster", "workload", "policy", "signals", "fitness")
COMPANIONS = {
    "workload=mixed_70_20_10": ["cluster=mixed_fleet"],  # its request types need runtime pools
    "policy=llmd": [f"policy.routing.endpoint_picker={Path(__file__).parent / 'data/endpoint_picker/prefix_load.yaml'}"],
    "workload=lora_zipf": ["cluster=lora"],  # adapters need a pool that serves LoRA
}


def _warnings(overrides: list[str], config_name: str = "config") -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolve(load_config(overrides, config_name=config_name))
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


@pytest.mark.parametrize("overrides", [
    AS_TRACE,  # the default workload's arrival and lengths are inherited, not set
    ["workload.input_tokens.dist=fixed", "workload.input_tokens.value=500"],  # its mu and sigma
    ["workload.arrival.process=mmpp", "workload.arrival.rates_rps=[5,40]", "workload.arrival.dwell_s=[6,1]"],
])
def test_a_switch_on_the_default_config_does_not_warn_of_what_it_inherits(overrides):
    assert _warnings(overrides) == []


@pytest.mark.parametrize("overrides, says", [
    ([*AS_TRACE, "workload.arrival.rate_rps=5"], "workload.arrival is set but not used"),
    (["workload=default", *AS_TRACE], "workload.arrival, workload.input_tokens, workload.output_tokens are set"),
    (["workload.arrival.cv=2"], "workload.arrival.cv: is set, but process 'poisson' does not use it"),
    (["workload=mmpp_burst", "workload.input_tokens.dist=fixed"], "workload.input_tokens.mu: is set"),
])
def test_what_the_user_set_still_warns(overrides, says):
    assert any(says in w for w in _warnings(overrides)), _warnings(overrides)


def _options() -> list[str]:
    return [f"{g}={p.stem}" for g in GROUPS for p in sorted((ROOT / "conf" / g).glob("*.yaml"))]


def test_every_shipped_config_validates_without_a_warning():
    warned = {o: w for o in ["", *_options()] if (w := _warnings([o, *COMPANIONS.get(o, [])] if o else []))}
    assert warned == {}


def test_the_search_config_and_its_families_validate_without_a_warning():
    from distsim.provenance import mark
    from distsim.search.driver import check_scenarios, check_settings

    assert _warnings([], config_name="search") == []
    cfg = load_config([], config_name="search")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        check_settings(cfg)
        check_scenarios(cfg, [], lambda ovs: mark(load_config(ovs, config_name="search"), ovs))


def test_the_cli_runs_a_trace_on_the_default_config_without_a_warning(tmp_path: Path):
    proc = run_module("distsim", *AS_TRACE, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr


def test_a_sweeps_configurations_are_checked_with_the_users_keys_only():
    """A sweep composes with Hydra directly (not load_config): its configurations carry the same marks."""
    from hydra import compose, initialize_config_dir

    from distsim.config.compose import CONF_DIR
    from distsim.runner.compose import compose_all
    from distsim.runner.plan import plan_sweep

    plan = plan_sweep([*AS_TRACE[:-1], "workload.max_rows=20,30"])
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="distsim"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConfigWarning)
            compose_all(plan.jobs, plan, lambda ovs: compose(config_name="config", overrides=ovs))
        plan = plan_sweep([*AS_TRACE, "workload.arrival.rate_rps=5,6"])
        with pytest.warns(ConfigWarning, match="workload.arrival is set but not used"):
            compose_all(plan.jobs, plan, lambda ovs: compose(config_name="config", overrides=ovs))
