"""llm-d EndpointPickerConfig files: read as weighted routing (policy=llmd), written from a search's winner,
and each file's bad input one line naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.policies.endpoint_picker import API_VERSION, KIND, document, read

DATA = Path(__file__).parent / "data" / "endpoint_picker"
SMALL = ["workload.num_requests=120", "cluster.instances=3", "workload.arrival.rate_rps=30", "sim.write_requests=false"]


def test_a_single_profile_file_reads_as_its_weights_and_prefix_index():
    picker = read(DATA / "prefix_load.yaml")
    assert picker.weights == {"prefix_affinity": 3.0, "queue_depth": 2.0, "kv_utilization": 2.0}
    assert picker.prefix_index_blocks == 20000


def test_p_d_profiles_with_named_instances_and_the_older_kv_name():
    assert read(DATA / "pd_named.yaml").weights == {"prefix_affinity": 2.0, "kv_utilization": 1.5}


def test_exported_weights_read_back_the_same():
    weights = {"prefix_affinity": 2.702, "queue_depth": 2.741, "kv_utilization": 2.424, "load_balance": 3.088, "mig_penalty": 0}
    doc = document(weights, prefix_index_blocks=5000, block_size=16)
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == KIND
    types = [p["type"] for p in doc["plugins"]]
    assert {"prefix-cache-scorer", "queue-scorer", "kv-cache-utilization-scorer", "active-request-scorer",
            "max-score-picker", "single-profile-handler"} == set(types)  # fmt: skip
    path = Path(pytest.importorskip("tempfile").mkdtemp()) / "epp.yaml"
    path.write_text(yaml.safe_dump(doc))
    back = read(path)
    assert back.weights == {k: v for k, v in weights.items() if v > 0}
    assert back.prefix_index_blocks == 5000


def test_a_scorer_without_an_llm_d_counterpart_is_refused_on_export():
    with pytest.raises(ConfigError, match="mig_penalty has no llm-d scorer"):
        document({"queue_depth": 1.0, "mig_penalty": 0.5})


def _summary(overrides: list[str]) -> str:
    """summary.json's figures (latency, goodput, prefix hits, ...) without the policy's name and the run's cost."""
    s = dict(simulate(load_config([*SMALL, *overrides])).summary)
    assert "ttft_ms" in s and "goodput" in s
    return json.dumps({k: v for k, v in s.items() if k not in ("policy", "perf", "provenance", "config")}, sort_keys=True, default=str)


def test_policy_llmd_simulates_as_weighted_with_the_files_weights_and_no_load_guard():
    from_file = _summary(["policy=llmd", f"policy.routing.endpoint_picker={DATA / 'prefix_load.yaml'}",
                          "workload=prefix_heavy"])  # fmt: skip
    by_hand = _summary(["policy=weighted", "policy.routing.scorers.prefix_affinity=3", "policy.routing.scorers.queue_depth=2",
                        "policy.routing.scorers.kv_utilization=2", "policy.routing.load_guard=1e300",
                        "policy.routing.prefix_index_blocks=20000", "workload=prefix_heavy"])  # fmt: skip
    assert from_file == by_hand


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ((DATA / "random_picker.yaml").read_text(), r"random_picker.yaml:5: plugin type 'random-picker' has no distsim"),
        ("kind: Other\n", "not an EndpointPickerConfig"),
        (f"apiVersion: v0\nkind: {KIND}\n", f"apiVersion must be {API_VERSION}"),
        (f"apiVersion: {API_VERSION}\nkind: {KIND}\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n"
         "  plugins:\n  - pluginRef: nope\n    weight: 1\n", r":8: pluginRef 'nope' names no plugin instance"),
        (f"apiVersion: {API_VERSION}\nkind: {KIND}\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n"
         "  plugins:\n  - pluginRef: queue-scorer\n    weight: -1\n", "weight of queue-scorer must be a finite number >= 0"),
        (f"apiVersion: {API_VERSION}\nkind: {KIND}\nplugins:\n- type: queue-scorer\n- type: kv-cache-scorer\n"
         "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n- name: b\n  plugins:\n"
         "  - pluginRef: kv-cache-scorer\n", "profiles a and b weigh their scorers differently"),
        ("a: [\n", "not YAML"),
    ],
)
def test_bad_files_are_one_line_naming_the_key_and_file(tmp_path, text, message):
    path = tmp_path / "random_picker.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"policy.routing.endpoint_picker: .*" + message):
        read(path)


def test_policy_llmd_without_a_file_and_a_missing_file_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs the file"):
        simulate(load_config([*SMALL, "policy=llmd"]))
    with pytest.raises(ConfigError, match="cannot read"):
        simulate(load_config([*SMALL, "policy=llmd", f"policy.routing.endpoint_picker={tmp_path / 'none.yaml'}"]))
