"""Every plug-in family is a Registry that finds its own members, lists them, and names the config key
and the known names when a config asks for one it does not have."""

from __future__ import annotations

import importlib
import sys

import pytest

from distsim.cells.registry import FRONTS
from distsim.errors import ConfigError
from distsim.instance.latency.registry import LATENCY_MODELS
from distsim.instance.queues import QUEUES
from distsim.metrics.fitness import FITNESS
from distsim.policies.registry import ADMISSIONS, ROUTERS
from distsim.policies.scorers.registry import SCORERS
from distsim.registry import Registry
from distsim.workload.arrival_processes import PROCESSES
from distsim.workload.kinds import KINDS
from distsim.workload.length_dists import DISTS
from distsim.workload.traces.formats import READERS

FAMILIES = [
    (QUEUES, "cluster.engine.scheduler", {"fcfs", "priority", "shortest_prompt", "predicted_output"}),
    (LATENCY_MODELS, "cluster.latency.kind", {"linear", "roofline"}),
    (KINDS, "workload.kind", {"synthetic", "trace"}),
    (READERS, "workload.format", {"mooncake", "azure", "burstgpt", "csv", "parquet"}),
    (PROCESSES, "workload.arrival.process", {"poisson", "gamma", "mmpp", "constant", "schedule"}),
    (DISTS, "workload.input_tokens.dist", {"fixed", "uniform", "lognormal", "exponential", "normal", "empirical"}),
    (ROUTERS, "policy.routing.kind", {"round_robin", "random", "least_loaded", "weighted", "session_affinity", "oracle"}),
    (ADMISSIONS, "policy.admission.kind", {"always", "token_bucket", "queue_limit", "slo_aware", "reject_all"}),
    (SCORERS, "policy.routing.scorers", {"queue_depth", "kv_utilization", "prefix_affinity", "load_balance"}),
    (FITNESS, "fitness.kind", {"goodput", "weighted"}),
    (FRONTS, "cluster.cells.front_policy", {"round_robin", "random", "least_loaded", "nearest"}),
]
IDS = [key for _, key, _ in FAMILIES]


@pytest.mark.parametrize("registry, key, members", FAMILIES, ids=IDS)
def test_registry_lists_its_members(registry, key, members):
    assert registry.key == key
    assert members <= set(registry.names())
    assert registry.names() == sorted(registry) and len(registry) == len(registry.names())
    for name in members:
        assert name in registry and registry[name] is registry.get(name)


@pytest.mark.parametrize("registry, key, members", FAMILIES, ids=IDS)
def test_unknown_name_is_one_config_error_naming_key_and_known(registry, key, members):
    with pytest.raises(ConfigError) as err:
        registry.get("nope")
    assert err.value.key == key
    assert "'nope'" in err.value.message and ", ".join(registry.names()) in err.value.message
    assert "\n" not in str(err.value)
    assert "nope" not in registry and ["x"] not in registry  # unhashable config values are just unknown


def test_a_copy_of_a_setting_names_its_own_key():
    with pytest.raises(ConfigError) as err:
        DISTS.get("zipf", "workload.tenants.profiles[0].input_tokens.dist")
    assert err.value.key == "workload.tenants.profiles[0].input_tokens.dist"


def test_duplicate_names_are_refused():
    reg: Registry[int] = Registry("thing", "x.kind")
    reg.register("a")(1)
    with pytest.raises(ValueError, match="'a' registered twice"):
        reg.register("a")(2)


def test_discovery_imports_every_module_of_the_members_package_on_first_lookup(tmp_path, monkeypatch):
    pkg = tmp_path / "plugins_for_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text(
        "from distsim.registry import Registry\nTHINGS = Registry('thing', 'x.kind', 'plugins_for_test')\n"
    )
    for name in ("alpha", "beta"):
        (pkg / f"{name}.py").write_text(
            f"from plugins_for_test.registry import THINGS\n@THINGS.register({name!r})\nclass Thing: pass\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("", ".registry", ".alpha", ".beta"):
        monkeypatch.delitem(sys.modules, "plugins_for_test" + mod, raising=False)
    things = importlib.import_module("plugins_for_test.registry").THINGS
    assert "plugins_for_test.alpha" not in sys.modules  # nothing imported the plug-ins by hand
    assert things.names() == ["alpha", "beta"] and "plugins_for_test.beta" in sys.modules
    things.discover()  # once only: a second import would register twice
    assert things.names() == ["alpha", "beta"]


def test_discovery_failure_is_retried():
    reg: Registry[object] = Registry("thing", "x.kind", "distsim.no_such_package")
    for _ in range(2):
        with pytest.raises(ModuleNotFoundError):
            reg.names()
