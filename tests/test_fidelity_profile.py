"""Latency profiles: loaded by shipped name or by path, applied under explicit config values, and
refused with the key or the file named when wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest
from omegaconf import OmegaConf

from distsim import load_config
from distsim.catalog import load_hardware, load_model
from distsim.cluster.pools import resolve_pools
from distsim.errors import ConfigError, InputFileError
from distsim.instance.latency.base import LatencyContext
from distsim.instance.latency.build import build_latency_model
from distsim.instance.latency.linear import LinearLatency
from distsim.instance.latency.profile import (
    LatencyProfile,
    load_profile,
    read_profile,
    shipped_profiles,
    write_profile,
)
from distsim.instance.latency.roofline import RooflineCoefficients, RooflineLatency

SHIPPED = "rtx4090-llama-3.1-8b-roofline"
LINEAR = {"base_us": 1234.0, "per_prefill_token_us": 0.5, "per_decode_token_us": 25.0}


def latency(cfg: dict):
    ctx = LatencyContext(load_model("llama-3.1-8b"), load_hardware("RTX4090"), 1)
    return build_latency_model(OmegaConf.create(cfg), ctx)


def test_shipped_profiles_load_by_name_case_insensitively():
    assert {SHIPPED, "rtxpro6000-llama-3.1-8b-roofline", "rtx4090-llama-3.1-8b-linear"} <= set(
        shipped_profiles()
    )
    p = load_profile(SHIPPED.upper())
    assert p.kind == "roofline" and set(p.coefficients) == {f.name for f in dataclasses.fields(RooflineCoefficients)}
    assert p.fitted_on["hardware"] == "RTX4090"
    assert (
        p.provenance["runs"][0]["name"] == "RTX4090_Llama-3.1-8B"
        and len(p.provenance["runs"][0]["sha256"]) == 64
    )


def test_profile_by_path_json_and_yaml(tmp_path):
    prof = LatencyProfile("mine", "linear", dict(LINEAR), {"hardware": "RTX4090"}, {"note": "test"})
    path = write_profile(prof, tmp_path / "mine.json")
    assert read_profile(path) == prof
    yml = tmp_path / "mine.yaml"
    yml.write_text(
        "kind: linear\ncoefficients:\n  base_us: 1234\n  per_prefill_token_us: 0.5\n  per_decode_token_us: 25\n"
    )
    assert load_profile(str(yml)).coefficients == LINEAR
    lm = latency({"kind": "roofline", "profile": str(path)})
    assert isinstance(lm, LinearLatency) and lm.base_us == 1234.0  # the profile chooses the kind


def test_explicit_coefficients_win_over_the_profile():
    p = load_profile(SHIPPED)
    lm = latency({"kind": "roofline", "profile": SHIPPED, "step_overhead_us": 0.0})
    assert isinstance(lm, RooflineLatency) and lm.coefficients.step_overhead_us == 0.0
    default = latency({"kind": "roofline", "profile": SHIPPED})
    assert default.coefficients.step_overhead_us == pytest.approx(p.coefficients["step_overhead_us"])
    # a shipped roofline profile sets every coefficient, so new defaults cannot change what it gives
    assert set(p.coefficients) == {f.name for f in dataclasses.fields(RooflineCoefficients)}


def test_profile_through_the_composed_config():
    cfg = load_config(
        ["cluster.hardware=RTX4090", "cluster.instances=1", f"cluster.latency.profile={SHIPPED}", "cluster.engine.max_model_len=8192"]
    )
    (pool,) = resolve_pools(cfg.cluster)
    p = load_profile(SHIPPED)
    ctx = LatencyContext(pool.model, pool.hardware, 1)
    expected = RooflineLatency(ctx, RooflineCoefficients(**p.coefficients))
    assert pool.latency._c_ptok == pytest.approx(expected._c_ptok) and pool.latency._m_kv == pytest.approx(
        expected._m_kv
    )


def test_unknown_profile_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError) as err:
        latency({"kind": "roofline", "profile": "no-such-profile"})
    assert err.value.key == "cluster.latency.profile" and "no-such-profile" in err.value.message
    assert SHIPPED in err.value.message  # lists what exists
    from distsim import simulate

    with pytest.raises(ConfigError) as err:
        simulate(load_config(["cluster.instances=1", "cluster.latency.profile=nope"]), requests=[])
    assert err.value.key == "cluster.latency.profile"


@pytest.mark.parametrize(
    "body, words, line",
    [
        ('{\n  "kind": "linear",\n  oops\n}', "not valid JSON", 3),
        (json.dumps({"kind": "cubic", "coefficients": {}}), "kind must be one of", None),
        (
            json.dumps({"kind": "linear", "coefficients": {"speed": 1}}),
            "unknown linear coefficient 'speed'",
            None,
        ),
        (
            json.dumps({"kind": "roofline", "coefficients": {"compute_efficiency": -1}}),
            "finite number >= 0",
            None,
        ),
        (json.dumps({"kind": "roofline"}), "missing 'coefficients'", None),
    ],
)
def test_broken_profile_file_names_the_file(tmp_path, body, words, line):
    path = tmp_path / "bad.json"
    path.write_text(body)
    with pytest.raises(InputFileError) as err:
        load_profile(str(path))
    assert err.value.path == str(path) and words in err.value.message and err.value.line == line
