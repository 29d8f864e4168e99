"""The workload config files: every shipped config builds, and the documented keys all exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from distsim import load_config, simulate
from distsim.workload import build_workload
from distsim.workload.schema import WorkloadConfig

ROOT = Path(__file__).resolve().parents[1]
CONFS = sorted((ROOT / "conf" / "workload").glob("*.yaml"))
NAMES = {p.stem for p in CONFS}
DATA = ROOT.parent / "shared" / "data"


def test_all_configs_exist():
    assert NAMES >= {
        "default", "poisson_chat", "mmpp_burst", "multi_tenant", "prefix_heavy", "sessions",
        "mooncake_conversation", "mooncake_synthetic", "azure_code", "azure_conv",
    }  # fmt: skip


@pytest.mark.parametrize("path", CONFS, ids=[p.stem for p in CONFS])
def test_config_merges_onto_schema_and_builds(path):
    raw = OmegaConf.load(path)
    if "defaults" in raw:  # a workload composed onto another: as Hydra composes it
        raw = load_config([f"workload={path.stem}"]).workload
    cfg = OmegaConf.merge(OmegaConf.structured(WorkloadConfig), raw)  # unknown keys fail here
    if cfg.kind == "trace":
        if not (ROOT / cfg.path).exists():
            pytest.skip("shared trace data not available")
        cfg.max_rows = 200
    else:
        cfg.num_requests = 2000
    source = build_workload(cfg, seed=0, block_size=16)
    if source.driven:  # closed loop: the arrivals come from a run (here a small one)
        df = simulate(load_config([f"workload={path.stem}", "workload.num_requests=200"])).requests
        arrivals = df.sort_values("request_id")["arrival_ms"].tolist()
        assert len(arrivals) == 200 and arrivals == sorted(arrivals)
        return
    reqs = list(source)
    assert len(reqs) == (2000 if cfg.kind == "synthetic" else 200)
    assert all(a.arrival_us <= b.arrival_us for a, b in zip(reqs, reqs[1:], strict=False))


DOCUMENTED = [
    "kind", "num_requests", "duration_s", "arrival.process", "arrival.rate_rps", "arrival.cv", "arrival.rates_rps",
    "arrival.dwell_s", "arrival.durations_s", "input_tokens.dist", "input_tokens.value", "input_tokens.low",
    "input_tokens.high", "input_tokens.mu", "input_tokens.sigma", "input_tokens.mean", "input_tokens.std",
    "input_tokens.path", "input_tokens.column", "input_tokens.min", "input_tokens.max", "output_tokens.dist",
    "prefix.groups", "prefix.tokens", "prefix.share", "prefix.zipf_s", "tenants.count", "tenants.zipf_s",
    "slo.ttft_ms", "slo.tpot_ms", "slo.classes", "sessions.enabled", "sessions.think_time_s.mean",
    "format", "path", "time_scale", "target_rate_rps", "start_s", "end_s", "max_rows", "jitter_s",
]  # fmt: skip


def test_documented_keys_exist_so_kinds_switch_without_plus():
    cfg = OmegaConf.structured(WorkloadConfig)
    for key in DOCUMENTED:
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", key
    switched = OmegaConf.merge(
        cfg,
        OmegaConf.from_dotlist(
            [
                "arrival.process=gamma",
                "arrival.cv=2",
                "output_tokens.dist=lognormal",
                "output_tokens.mu=3",
                "output_tokens.sigma=0.8",
            ]
        ),
    )
    assert len(list(build_workload(switched, seed=0))) == 1000


def test_dict_and_dataclass_inputs_work():
    assert len(list(build_workload(WorkloadConfig(num_requests=5), seed=0))) == 5
    assert len(list(build_workload({"num_requests": 5}, seed=0))) == 5


@pytest.mark.skipif(not (ROOT / "conf" / "config.yaml").exists(), reason="conf/config.yaml not written yet")
@pytest.mark.parametrize("name", ["default", "sessions", "multi_tenant", "azure_code"])
def test_hydra_composition(name):
    from hydra import compose, initialize_config_dir

    try:
        from distsim.config.schema import register_schemas

        register_schemas()
    except ImportError:  # pragma: no cover
        pass
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"workload={name}", "workload.num_requests=50"])
    if cfg.workload.kind == "trace" and not (ROOT / cfg.workload.path).exists():
        pytest.skip("shared trace data not available")
    reqs = list(build_workload(cfg.workload, seed=cfg.seed, block_size=cfg.cluster.engine.block_size))
    assert len(reqs) == 50
