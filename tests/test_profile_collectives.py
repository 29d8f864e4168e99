"""The all-reduce terms fitted from a user's GPU profile (distsim/fidelity/collectives.py, the fit
scripts/allreduce_fit.py shares): a table made by the model from known terms is fitted back; a table
that cannot pin a term (one group size, one message size) holds it at its prior and names it; the
numpy backend's all-reduce over CPU processes goes through the profiler and ``calibrate steps --fit``
end to end; a catalog GPU's fitted terms reach step_fit.json's values, ``calibrate runs --steps`` and a
simulation; bad input is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clikit import ROOT, assert_user_error, run_module

from distsim import load_config, simulate
from distsim.calibrate.runs import gpu_overrides
from distsim.catalog import load_hardware
from distsim.errors import ConfigError, InputFileError
from distsim.fidelity import collectives as fc
from distsim.fidelity.steps import cli as steps_cli
from distsim.instance.latency import allreduce as ar
from distsim.profile import cli
from distsim.profile.grid import FULL

TINY_MODEL = str(ROOT / "tests" / "fixtures" / "profile" / "tiny-llama.json")
RING = (30.0, 2.0, 0.6)  # known terms, none of them the prior's
PCIE = (40.0, 0.45)


def table(gpu: str, tps=(2, 4, 8), sizes=FULL.all_reduce_bytes, ring=RING, pcie=PCIE) -> pd.DataFrame:
    """An all-reduce table as the profiler writes it, each row the NCCL model's time at known terms."""
    hw = load_hardware(gpu)
    nvlink = hw.link_gbps_per_dir > hw.host_link_gbps_per_dir
    rows = [{"gpu": gpu, "tp": tp, "bytes": b,
             "measured_ms": ar.all_reduce_us(b, tp, hw.link_gbps_per_dir, nvlink, True, False, 0.0, hw.host_link_gbps_per_dir,
                                             nccl_ring=ring, nccl_pcie=pcie) / 1e3}
            for tp in tps for b in sizes]
    return pd.DataFrame(rows)


def test_a_ring_table_from_known_terms_is_fitted_back():
    got = fc.fit_profile(table("H100"), load_hardware("H100"), True)
    assert got.path == "nccl_ring" and got.group_sizes == [2, 4, 8] and got.sizes == 4  # 8-64 MiB
    assert list(got.fit.values.values()) == pytest.approx(RING, rel=1e-3)
    assert got.fit.held == [] and got.fit.on_bound == [] and got.fit.error["max_abs_pct"] < 0.1
    assert [w for w in got.warnings if "nccl" in w] == []  # only the custom terms' note
    assert any("all_reduce_two_shot_us" in w and "not measured" in w for w in got.warnings)


def test_a_pcie_table_from_known_terms_is_fitted_back():
    got = fc.fit_profile(table("RTXPRO6000"), load_hardware("RTXPRO6000"), True)
    assert got.path == "nccl_pcie"
    assert list(got.fit.values.values()) == pytest.approx(PCIE, rel=1e-3)
    assert got.fit.held == [] and got.fit.on_bound == []


def test_noise_moves_the_fit_little():
    frame = table("H100")
    frame["measured_ms"] *= np.random.default_rng(3).uniform(0.97, 1.03, len(frame))
    got = fc.fit_profile(frame, load_hardware("H100"), True)
    assert list(got.fit.values.values()) == pytest.approx(RING, rel=0.2)
    assert 0 < got.fit.error["mean_abs_pct"] < 3


def test_a_table_missing_group_sizes_holds_the_ring_step_at_its_prior_and_says_so():
    got = fc.fit_profile(table("H100", tps=(2,)), load_hardware("H100"), True)
    assert got.fit.held == ["all_reduce_nccl_step_us"]
    assert got.fit.values["all_reduce_nccl_step_us"] == pytest.approx(ar.NCCL_RING[1])
    assert got.fit.values["all_reduce_nccl_bus_efficiency"] == pytest.approx(RING[2], rel=1e-3)  # still pinned
    (line,) = [w for w in got.warnings if w.startswith("all_reduce_nccl_step_us")]
    assert "not pinned" in line and "group size(s) 2" in line


def test_one_message_size_cannot_tell_a_fixed_time_from_a_bandwidth():
    got = fc.fit_profile(table("RTXPRO6000", sizes=(1 << 20,)), load_hardware("RTXPRO6000"), True)
    assert got.fit.held == ["all_reduce_pcie_fixed_us"]
    assert any(w.startswith("all_reduce_pcie_fixed_us is not pinned") for w in got.warnings)


def test_no_message_in_the_nccl_band_holds_every_ring_term():
    got = fc.fit_profile(table("H100", sizes=(1 << 12, 1 << 16)), load_hardware("H100"), True)
    assert sorted(got.fit.held) == sorted(got.fit.values)
    assert any("no all-reduce of 8-64 MiB" in w for w in got.warnings)


def test_a_bandwidth_above_the_link_ends_on_its_bound_and_says_so():
    fast = table("H100", ring=(30.0, 2.0, 0.6))
    fast["measured_ms"] = fast["measured_ms"] * 0.01 + 0.03  # faster than the link moves the bytes
    got = fc.fit_profile(fast, load_hardware("H100"), True)
    assert "all_reduce_nccl_bus_efficiency" in got.fit.on_bound
    assert got.fit.values["all_reduce_nccl_bus_efficiency"] == pytest.approx(1.0)
    assert any(w.startswith("all_reduce_nccl_bus_efficiency ended on its bound") for w in got.warnings)


def test_the_cpu_all_reduce_goes_through_the_profiler_and_the_fit(tmp_path):
    out = tmp_path / "p"
    argv = ["--model", TINY_MODEL, "--backend", "numpy", "--grid", "tiny", "--target-ms", "1", "--cpu-ranks", "2",
            "--out", str(out), "--fit"]
    assert cli.main(argv) == 0
    ar_table = pd.read_csv(out / "micro_all_reduce.csv")
    assert set(ar_table["tp"]) == {2} and len(ar_table) == 3 and (ar_table["measured_ms"] > 0).all()
    fit = json.loads((out / "fit" / "step_fit.json").read_text())
    section = fit["all_reduce"]
    assert section["path"] == "nccl_pcie" and section["group_sizes"] == [2] and section["error"]["points"] == 3
    assert section["in_values"] is False and not any(k.startswith("all_reduce") for k in fit["values"])  # a CPU
    assert any("no catalog GPU" in w for w in fit["warnings"])
    assert "All-reduce (nccl_pcie" in (out / "fit" / "steps.md").read_text()


@pytest.fixture(scope="module")
def h100_profile(tmp_path_factory) -> Path:
    """A profile folder of the tiny model whose tables name an H100, with a known all-reduce table."""
    out = tmp_path_factory.mktemp("h100")
    assert cli.main(["--model", TINY_MODEL, "--backend", "numpy", "--grid", "tiny", "--target-ms", "1", "--out", str(out)]) == 0
    steps = pd.read_csv(out / "tiny-llama.csv")
    steps["gpu"] = "NVIDIA H100 80GB HBM3"
    steps.to_csv(out / "tiny-llama.csv", index=False)
    table("H100").assign(gpu="NVIDIA H100 80GB HBM3").to_csv(out / fc.TABLE, index=False)
    return out


def test_a_catalog_gpus_terms_reach_the_fit_the_run_fit_and_a_simulation(h100_profile, tmp_path, capsys):
    assert steps_cli.main([str(h100_profile), "--fit", "--out", str(tmp_path)]) == 0
    assert "warning: all_reduce_latency_us" in capsys.readouterr().err
    values = json.loads((tmp_path / "step_fit.json").read_text())["values"]
    assert [values[k] for k in ("all_reduce_nccl_fixed_us", "all_reduce_nccl_step_us", "all_reduce_nccl_bus_efficiency")] == pytest.approx(RING, rel=1e-3)
    overrides = gpu_overrides(tmp_path / "step_fit.json")
    assert overrides == gpu_overrides(h100_profile)  # the folder fitted in place gives the same
    assert "cluster.latency.all_reduce_nccl_bus_efficiency=0.6" in overrides
    base = ["workload.num_requests=10", "cluster.engine.tensor_parallel_size=8", "cluster.instances=1",
            "cluster.latency.serving.custom_all_reduce=false"]  # every all-reduce on NCCL's ring
    slow = [o for o in overrides if "all_reduce" in o]
    runs = [simulate(load_config(base)), simulate(load_config([*base, *slow]))]
    assert runs[1].summary["e2e_ms"]["mean"] > runs[0].summary["e2e_ms"]["mean"]  # 30 us fixed beside 22


def test_the_shared_fit_reproduces_the_shipped_h100_fit():
    import importlib.util

    spec = importlib.util.spec_from_file_location("allreduce_fit", ROOT / "scripts" / "allreduce_fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = json.loads((ROOT / "docs" / "data" / "allreduce_fit.json").read_text())
    assert json.loads(json.dumps(module.fit(ROOT.parent / "shared" / "data"))) == shipped


def test_a_bad_all_reduce_table_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / fc.TABLE
    pd.DataFrame({"tp": [2], "bytes": [4096]}).to_csv(path, index=False)
    with pytest.raises(InputFileError, match="measured_ms"):
        fc.read_table(path)
    pd.DataFrame({"tp": [1], "bytes": [4096], "measured_ms": [0.1]}).to_csv(path, index=False)
    with pytest.raises(InputFileError, match="tp"):
        fc.read_table(path)


def test_a_bad_table_in_a_profile_exits_2(h100_profile, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(h100_profile, folder)
    (folder / fc.TABLE).write_text("tp,bytes,measured_ms\n2,4096,-1\n")
    proc = run_module("distsim.calibrate", "steps", str(folder), "--fit")
    assert_user_error(proc, 2, fc.TABLE)


@pytest.mark.parametrize("key", ["all_reduce_nccl_bus_efficiency", "all_reduce_pcie_efficiency"])
def test_an_efficiency_above_one_is_one_line_naming_the_key(key):
    with pytest.raises(ConfigError, match=f"cluster.latency.{key}"):
        simulate(load_config(["workload.num_requests=5", f"cluster.latency.{key}=1.5"]))


def test_a_negative_nccl_time_on_the_command_line_exits_2():
    proc = run_module("distsim", "workload.num_requests=5", "cluster.latency.all_reduce_nccl_fixed_us=-3")
    assert_user_error(proc, 2, "cluster.latency.all_reduce_nccl_fixed_us")


def test_cpu_ranks_go_with_the_numpy_backend(tmp_path):
    proc = run_module("distsim.profile", "--model", TINY_MODEL, "--backend", "torch", "--cpu-ranks", "2", "--out", str(tmp_path))
    assert_user_error(proc, 2, "--cpu-ranks")
