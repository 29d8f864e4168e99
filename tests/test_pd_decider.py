"""The P/D decider (policy.pd_decider, distsim/cluster/pd_decider.py): a request decided local prefills on
its decode instance and never moves KV; one decided remote always does, once; timestamps stay causal; a
threshold of 0 is the fleet without a decider; bad values are one line naming the key."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from simkit import FAKE_HW, engine, policy, run, tiny_model, transfer

from distsim import load_config
from distsim.cluster.pd_decider import PDDecider
from distsim.cluster.pools import PoolSpec
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request
from distsim.resolve import resolve

LATENCY = LinearLatency(100.0, 2.0, 5.0)
PREFILL, DECODE = (0, 1), (2, 3)  # instance numbers of the two pools


def _pools():
    params = engine(max_num_seqs=16, max_num_batched_tokens=128, block_size=4, total_kv_blocks=400)
    return [
        PoolSpec("prefill", 2, "prefill", FAKE_HW, tiny_model(1000), 1, params, LATENCY, "cluster.pools[0]"),
        PoolSpec("decode", 2, "decode", FAKE_HW, tiny_model(1000), 1, params, LATENCY, "cluster.pools[1]"),
    ]


def _requests(n: int = 120, seed: int = 4) -> list[Request]:
    """Prompts of 8-200 tokens, a third sharing a 16-block prefix (so a decode cache can hold part of one)."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(2000, n)).astype(int)
    out = []
    for i in range(n):
        tokens = int(rng.integers(8, 200))
        blocks = -(-tokens // 4)
        shared = min(blocks, 16) if i % 3 == 0 else 0
        hashes = tuple(range(shared)) + tuple(10**6 + i * 100 + b for b in range(blocks - shared))
        out.append(Request(i, int(t[i]), tokens, int(rng.integers(2, 40)), block_hashes=hashes))
    return out


class Transfers:
    """A cluster listener counting each request's hand-offs and KV transfers, with their start times."""

    def __init__(self):
        self.handed: dict[int, int] = {}
        self.moved: dict[int, list[int]] = {}

    def handed_off(self, req, now):
        self.handed[req.request_id] = now

    def kv_transfer(self, req, start_us, duration_us, nbytes):
        self.moved.setdefault(req.request_id, []).append(start_us + duration_us)

    def hedged(self, *args):
        raise AssertionError("no hedging here")


def _run(decider: PDDecider | None, requests=None):
    seen = Transfers()
    sim = run(
        requests or _requests(), pools=_pools(), transfer_cfg=transfer(0.5, 50.0), routing="least_loaded",
        policy_cfg=dataclasses.replace(policy("least_loaded"), pd_decider=decider), check_every_event=True,
        on_built=lambda s: s.cluster.listeners.append(seen),
    )
    return sim, sim.recorder.table(), seen


@pytest.mark.parametrize("subtract_cached", [False, True])
def test_local_requests_never_move_kv_and_remote_ones_always_do_once(subtract_cached):
    sim, table, seen = _run(PDDecider(100, subtract_cached))
    assert (table["status"] == "completed").all()
    local = table[table["prefill_instance"] < 0]
    remote = table[table["prefill_instance"] >= 0]
    assert 0 < len(local) < len(table)
    assert sim.cluster.local_prefills == len(local)
    assert local["instance"].isin(DECODE).all() and remote["instance"].isin(DECODE).all()
    assert remote["prefill_instance"].isin(PREFILL).all()
    assert not set(local["request_id"]) & (set(seen.moved) | set(seen.handed))  # never transferred
    assert set(remote["request_id"]) == set(seen.moved) == set(seen.handed)  # always, exactly once each
    assert all(len(v) == 1 for v in seen.moved.values())
    assert sim.cluster.transfers == len(remote)
    # a prompt within the threshold is always local (the uncached part is at most the prompt); without
    # subtracting the cache, the prompt length alone decides
    assert (remote["input_tokens"] > 100).all()
    if not subtract_cached:
        assert (local["input_tokens"] <= 100).all()
    else:
        assert (local["input_tokens"] > 100).any()  # a cached shared prefix made a long prompt local


def test_timestamps_stay_causal_and_a_remote_first_token_waits_for_its_kv():
    _, table, seen = _run(PDDecider(100))
    assert (table["first_token_ms"] >= table["arrival_ms"]).all()
    assert (table["completion_ms"] >= table["first_token_ms"]).all()
    for rid, landed in seen.moved.items():
        row = table[table["request_id"] == rid].iloc[0]
        assert seen.handed[rid] / 1000 >= row["arrival_ms"]
        assert row["first_token_ms"] == pytest.approx(landed[0] / 1000)  # the token reaches the user with the KV


def test_a_threshold_of_zero_disaggregates_every_request_as_without_a_decider():
    _, off, _ = _run(None)
    sim, zero, _ = _run(PDDecider(0))
    assert sim.cluster.local_prefills == 0
    assert off.equals(zero)


@pytest.mark.parametrize(("override", "message"), [
    ("policy.pd_decider.threshold_tokens=-1", "policy.pd_decider.threshold_tokens: must be >= 0"),
    ("policy.pd_decider.threshold_tokens=1.5", "policy.pd_decider.threshold_tokens: must be an integer"),
])
def test_a_bad_threshold_is_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve(load_config(["cluster=pd_disagg", override]))


def test_a_decider_with_hedging_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="policy.pd_decider.threshold_tokens: cannot be combined with policy.hedge"):
        resolve(load_config(["cluster=pd_disagg", "policy.pd_decider.threshold_tokens=512", "policy.hedge.delay_ms=50"]))


def test_the_shipped_search_chooses_the_threshold_and_its_policy_file_decides_on_a_pd_fleet_only(tmp_path):
    from omegaconf import OmegaConf

    from distsim import simulate
    from distsim.config.compose import CONF_DIR
    from distsim.search.driver import write_policy
    from distsim.search.space import SearchSpace

    spec = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "search.yaml").search.space)
    part = spec["pd_threshold"]
    assert part["key"] == "policy.pd_decider.threshold_tokens" and 0 in part["choices"]  # 0: as without a decider
    values = SearchSpace({"pd_threshold": part}).values({part["key"]: part["choices"].index(4096)})
    path = write_policy(tmp_path, "evolved", "least_loaded", values)
    assert OmegaConf.load(path).pd_decider.threshold_tokens == 4096
    run = [f"hydra.searchpath=[file://{tmp_path}]", "policy=evolved", "workload.num_requests=40"]
    pd = simulate(load_config([*run, "cluster=pd_disagg"])).summary["kv_transfer"]
    assert pd["local_prefills"] > 0 and pd["transfers"] + pd["local_prefills"] == 40
    assert "kv_transfer" not in simulate(load_config(run)).summary  # a mixed fleet: nothing to decide
