"""A key added with ``+`` where the schema is closed is refused as the same key without ``+`` is: one line
naming it and the section's keys, exit 2; ``+`` still adds a key where the schema leaves a mapping open."""

from __future__ import annotations

import pytest
from clikit import assert_user_error, run_module

from distsim import load_config
from distsim.errors import ConfigError
from distsim.resolve import resolve

ADDED = [
    "cluster.engine.enable_prefix_cache=false",  # a typo of enable_prefix_caching
    "cluster.engine.bogus=1",
    "workload.bogus=1",
    "sim.bogus=1",
    "bogus_top=1",
    "workload.arrival.bogus=1",
]


@pytest.mark.parametrize("override", ADDED)
def test_load_config_refuses_an_added_key_as_it_refuses_the_key(override):
    with pytest.raises(ConfigError) as plain:
        load_config([override])
    with pytest.raises(ConfigError) as added:
        load_config([f"+{override}"])
    assert str(added.value) == str(plain.value)
    assert added.value.key == override.split("=")[0]


def test_an_added_key_inside_a_pool_is_refused():
    with pytest.raises(ConfigError, match=r"cluster\.pools\[0\]\.bogus: unknown key; known: name, kind"):
        load_config(["cluster=pd_disagg", "+cluster.pools.0.bogus=1"])


@pytest.mark.parametrize("override", [
    "+workload.types.ocr={slo_ms:50}",
    "+signals.per_signal.kv_utilization={interval_ms:500}",
    "+search.train.big='cluster.instances=8'",
])
def test_plus_still_adds_a_key_to_an_open_mapping(override):
    resolve(load_config([override]))


def test_the_cli_a_sweep_and_the_search_refuse_an_added_key_in_one_line(tmp_path):
    plain = run_module("distsim", "cluster.engine.enable_prefix_cache=false", f"hydra.run.dir={tmp_path / 'p'}")
    line = assert_user_error(plain, 2, "config error: cluster.engine.enable_prefix_cache: unknown key; known: ")
    added = run_module("distsim", "+cluster.engine.enable_prefix_cache=false", f"hydra.run.dir={tmp_path / 'a'}")
    assert assert_user_error(added, 2) == line
    assert added.stderr.strip() == line  # nothing else, no run
    assert not (tmp_path / "a" / "summary.json").exists()
    sweep = run_module("distsim", "-m", "seed=0,1", "+sim.bogus=1", "runner.num_workers=1", "runner.progress=false",
                       f"hydra.sweep.dir={tmp_path / 's'}")
    assert_user_error(sweep, 2, "config error: sim.bogus: unknown key; known: horizon_s")
    search = run_module("distsim.search", "+workload.bogus=1", f"hydra.run.dir={tmp_path / 'r'}")
    assert_user_error(search, 2, "distsim.search: config error: workload.bogus: unknown key; known: kind")


def test_a_config_composed_elsewhere_is_checked_when_resolved():
    """Sweeps and the search compose with Hydra directly: resolve() is the gate every run passes."""
    from omegaconf import OmegaConf

    cfg = load_config([])
    OmegaConf.update(cfg, "sim.bogus", 1, force_add=True)  # what Hydra's + does
    with pytest.raises(ConfigError, match="sim.bogus: unknown key"):
        resolve(cfg)
