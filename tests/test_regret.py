"""Fork-and-replay regret (distsim/regret/fork.py, run.py), the latency lower bound (distsim/regret/bound.py)
and the clairvoyant oracle router (distsim/policies/oracle.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from clikit import assert_user_error, run_module

from distsim import load_config, simulate
from distsim.config.regret import RegretSettings, regret_settings
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.policies.oracle import shadow
from distsim.regret.bound import bound_summary, latency_bounds
from distsim.regret.run import check_supported, decision_table, regret, sample, summary
from distsim.request import Request
from distsim.resolve import resolve

# linear step times (DESIGN.md): base 1 ms, 0.1 ms per prefill token, 0.2 ms per decode token; no front end
LINEAR = [
    "cluster.latency.kind=linear", "cluster.latency.base_us=1000", "cluster.latency.per_prefill_token_us=100",
    "cluster.latency.per_decode_token_us=200", "cluster.frontend.per_input_token_us=0",
    "cluster.engine.total_kv_blocks=4096", "cluster.engine.max_model_len=16384",
]  # fmt: skip
SMALL = ["workload.num_requests=150", "workload.arrival.rate_rps=20"]


def linear(instances: int, *extra: str):
    return load_config([*LINEAR, f"cluster.instances={instances}", *extra])


def requests(spec: list[tuple[float, int, int]]) -> list[Request]:
    """Requests of (arrival ms, prompt tokens, output tokens), with no shared prefix."""
    return [Request(i, int(ms * 1000), p, d) for i, (ms, p, d) in enumerate(spec)]


def replayed(cfg, spec, samples=100, horizon_s=5.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's requests table and the regret table of every (or ``samples``) decisions."""
    result = simulate(cfg, requests(spec))
    decisions = regret(resolve(cfg, requests(spec)), result.requests, RegretSettings(samples, int(horizon_s * 1e6)))
    return result.requests, decision_table(decisions)


def test_one_instance_has_no_regret():
    _, table = replayed(linear(1), [(0, 100, 20), (1, 300, 40), (2, 50, 5), (30, 80, 10)])
    assert len(table) == 4 and (table["candidates"] == 1).all()
    for metric in ("ttft_regret_ms", "e2e_regret_ms", "window_regret_s"):
        assert (table[metric] == 0).all()


def test_identical_idle_alternatives_have_no_regret():
    """Requests far apart: each finds every instance idle and empty, so every candidate is the same."""
    spec = [(t * 1000.0, 200, 30) for t in range(5)]
    _, table = replayed(linear(3, "policy=round_robin"), spec)
    assert len(table) == 5 and (table["candidates"] == 3).all()
    for metric in ("ttft_regret_ms", "e2e_regret_ms", "window_regret_s"):
        assert (table[metric] == 0).all(), table[metric]


def test_round_robin_onto_a_busy_instance_has_positive_regret():
    """Request 0 keeps instance 0 busy; request 1 is over at once on instance 1; round robin sends request 2
    back to instance 0 although instance 1 is idle: its TTFT, E2E and the window's latency all suffer."""
    runs, table = replayed(linear(2, "policy=round_robin"), [(0, 2000, 400), (1, 10, 1), (50, 1000, 50)])
    third = table.set_index("request_id").loc[2]
    assert third["chosen"] == 0 and third["ttft_best_instance"] == 1 and third["e2e_best_instance"] == 1
    assert third["ttft_regret_ms"] > 0 and third["e2e_regret_ms"] > 0 and third["window_regret_s"] > 0
    # request 0 found both instances idle, yet its E2E has a regret too: sent to instance 1, round robin would
    # then have sent request 2 to instance 0, so request 0 would have decoded alone. The replay lets the
    # policy go on after the forced decision, so a decision's regret includes what it does to later ones.
    assert table.set_index("request_id").loc[0, "ttft_regret_ms"] == 0
    assert (table.filter(like="_regret_") >= 0).all().all()


def test_the_replay_of_the_policys_own_choice_is_the_run():
    cfg = load_config([*SMALL, "policy=least_loaded"])
    result = simulate(cfg)
    decisions = regret(resolve(cfg), result.requests, RegretSettings(6, 60_000_000))
    runs = result.requests.set_index("request_id")
    assert len(decisions) == 6
    for d in decisions:
        own = d.outcomes[d.chosen]
        assert not own.e2e_censored
        assert own.ttft_us / 1000.0 == pytest.approx(runs.loc[d.request_id, "ttft_ms"], abs=1e-9)
        assert own.e2e_us / 1000.0 == pytest.approx(runs.loc[d.request_id, "e2e_ms"], abs=1e-9)
        assert runs.loc[d.request_id, "instance"] == d.members[d.chosen]


@pytest.mark.parametrize("policy", ["least_loaded", "weighted"])
def test_a_pinned_replay_of_the_own_choice_is_the_run_too(policy):
    cfg = load_config([*SMALL, f"policy={policy}", "signals=stale_250ms"])
    result = simulate(cfg)
    pinned = regret(resolve(cfg), result.requests, RegretSettings(4, 60_000_000, pin_later=True))
    runs = result.requests.set_index("request_id")
    for d in pinned:
        assert d.outcomes[d.chosen].e2e_us / 1000.0 == pytest.approx(runs.loc[d.request_id, "e2e_ms"], abs=1e-9)
    table = decision_table(pinned)
    assert (table.filter(like="_regret_") >= 0).all().all()


def test_pinning_changes_nothing_for_a_policy_that_does_not_react():
    """Round robin's later picks do not depend on where a request went: pinned or not, the same replays."""
    cfg = load_config([*SMALL, "policy=round_robin"])
    result = simulate(cfg)
    free = decision_table(regret(resolve(cfg), result.requests, RegretSettings(4, 5_000_000)))
    pinned = decision_table(regret(resolve(cfg), result.requests, RegretSettings(4, 5_000_000, pin_later=True)))
    pd.testing.assert_frame_equal(free, pinned)


def test_regret_is_deterministic_and_samples_by_the_seed():
    cfg = load_config([*SMALL, "policy=weighted", "signals=stale_250ms"])
    result = simulate(cfg)
    settings = RegretSettings(5, 3_000_000)
    a = decision_table(regret(resolve(cfg), result.requests, settings))
    b = decision_table(regret(resolve(cfg), result.requests, settings))
    pd.testing.assert_frame_equal(a, b)
    assert sample(result.requests, 5, 0) == a["request_id"].tolist()
    assert sample(result.requests, 5, 1) != sample(result.requests, 5, 0)
    assert sample(result.requests, 10_000, 0) == sorted(result.requests["request_id"].tolist())
    figures = summary(regret(resolve(cfg), result.requests, settings), settings)
    assert figures["samples"] == 5 and 0 <= figures["e2e_ms"]["share_positive"] <= 1


def test_a_short_horizon_censors_and_stays_a_lower_bound():
    cfg = load_config([*SMALL, "policy=round_robin"])
    result = simulate(cfg)
    table = decision_table(regret(resolve(cfg), result.requests, RegretSettings(3, 50_000)))
    assert table["e2e_censored"].all()  # nobody finishes 640 tokens in 50 ms
    assert (table["e2e_chosen_ms"] >= 0).all() and (table["e2e_regret_ms"] >= 0).all()


@pytest.mark.parametrize(
    "override, key",
    [("regret.samples=-1", "regret.samples"), ("regret.samples=1.5", "regret.samples"),
     ("regret.horizon_s=0", "regret.horizon_s"), ("regret.horizon_s=-3", "regret.horizon_s"),
     ("regret.horizon_s=inf", "regret.horizon_s")],
)  # fmt: skip
def test_bad_regret_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        regret_settings(load_config([override]))
    assert err.value.key == key


def test_regret_refuses_cells_naming_the_key():
    cfg = load_config(["cluster.instances=4", "cluster.cells.count=2", "regret.samples=3"])
    with pytest.raises(ConfigError) as err:
        check_supported(resolve(cfg))
    assert err.value.key == "regret.samples"


def test_the_cli_writes_regret_beside_unchanged_outputs(tmp_path):
    args = ["workload.num_requests=120", "policy=least_loaded"]
    plain = run_module("distsim", *args, f"hydra.run.dir={tmp_path / 'plain'}")
    with_regret = run_module("distsim", *args, "regret.samples=3", "regret.horizon_s=5",
                             f"hydra.run.dir={tmp_path / 'regret'}")  # fmt: skip
    assert plain.returncode == 0 and with_regret.returncode == 0, with_regret.stderr[-2000:]
    for name in ("summary.json", "requests.parquet", "instances.parquet"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "regret" / name).read_bytes(), name
    table = pd.read_csv(tmp_path / "regret" / "regret.csv")
    assert len(table) == 3 and (table["e2e_regret_ms"] >= 0).all()
    assert len(pd.read_csv(tmp_path / "regret" / "regret_alternatives.csv")) == 3 * 4
    assert "regret" in with_regret.stdout and (tmp_path / "regret" / "regret.json").exists()
    assert not (tmp_path / "plain" / "regret.json").exists()
    assert_user_error(run_module("distsim", "regret.horizon_s=-1", f"hydra.run.dir={tmp_path / 'bad'}"), 2,
                      "regret.horizon_s")  # fmt: skip


# ------------------------------------------------------------------ the lower bound


def test_the_bound_is_exact_for_a_lone_request():
    """DESIGN.md: alone, with fixed lengths, service = (base + per_prefill x P) + (D - 1)(base + per_decode)."""
    cfg = linear(2, "cluster.engine.max_num_seqs=1", "cluster.engine.max_num_batched_tokens=4096")
    spec = [(0, 300, 20)]
    result = simulate(cfg, requests(spec))
    bounds = latency_bounds(resolve(cfg, requests(spec)))
    assert bounds.loc[0, "ttft_bound_ms"] == pytest.approx(1.0 + 0.1 * 300)
    assert bounds.loc[0, "e2e_bound_ms"] == pytest.approx(31.0 + 19 * 1.2)
    assert result.requests.loc[0, "ttft_ms"] == pytest.approx(bounds.loc[0, "ttft_bound_ms"])
    assert result.requests.loc[0, "e2e_ms"] == pytest.approx(bounds.loc[0, "e2e_bound_ms"])


@pytest.mark.parametrize("policy", ["round_robin", "least_loaded", "weighted", "prefix_affinity", "oracle"])
@pytest.mark.parametrize("extra", [[], ["workload=prefix_heavy"], ["workload=sessions"]], ids=["default", "prefix", "sessions"])
def test_no_policy_beats_the_bound(policy, extra):
    cfg = load_config([*SMALL, f"policy={policy}", *extra])
    result = simulate(cfg)
    figures = bound_summary(latency_bounds(resolve(cfg)), result.requests)
    assert figures["requests"] > 100
    for metric in ("ttft_ms", "e2e_ms"):
        assert figures[metric]["beat_their_bound"] == 0
        for q in ("mean", "p50", "p90", "p99"):
            assert figures[metric]["bound"][q] <= figures[metric]["run"][q]


# ------------------------------------------------------------------ the oracle


def test_the_shadow_matches_the_engine_for_one_request():
    model = LinearLatency(1000.0, 100.0, 200.0)
    first, done = shadow([(300, 20, 0)], model, 4096, 8)
    assert first == [31_000] and done == [31_000 + 19 * 1_200]
    first, done = shadow([(0, 5, 100), (100, 3, 0)], model, 4096, 8)  # a decoder and a new prompt share steps
    assert first[0] == 0 and first[1] == 1000 + 100 * 100 + 200 and done[1] > first[1]


def test_the_oracle_beats_or_ties_load_balancers():
    e2e = {}
    for policy in ("round_robin", "least_loaded", "oracle"):
        e2e[policy] = simulate(load_config(["workload.num_requests=300", f"policy={policy}"])).summary["e2e_ms"]["mean"]
    assert e2e["oracle"] <= min(e2e["round_robin"], e2e["least_loaded"]), e2e


def test_the_oracle_sends_a_request_to_the_idle_instance():
    """The busy-instance case: the oracle avoids the mistake round robin makes."""
    result = simulate(linear(2, "policy=oracle"), requests([(0, 2000, 400), (1, 10, 1), (50, 1000, 50)]))
    assert result.requests.set_index("request_id").loc[2, "instance"] != result.requests.loc[0, "instance"]


def test_a_bad_oracle_objective_names_the_key():
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["policy=oracle", "policy.routing.objective=best"]))
    assert err.value.key == "policy.routing.objective"
    assert math.isfinite(simulate(load_config(["policy=oracle", "policy.routing.objective=ttft",
                                               "workload.num_requests=40"])).summary["ttft_ms"]["mean"])


PD_DECIDER = ["cluster=pd_disagg", "policy=pd_decider", "policy.pd_decider.threshold_tokens=1024",
              "workload.num_requests=150", "workload.arrival.rate_rps=10"]  # fmt: skip


@pytest.mark.parametrize("pin_later", [False, True])
def test_under_the_pd_decider_the_decode_pick_is_replayed_and_the_own_choice_is_the_run(pin_later):
    """The decider routes the decode instance first, so that is the decision replayed, for a request the run
    kept local (no prefill instance) as for one it disaggregated; replaying the run's own pick is the run."""
    cfg = load_config(PD_DECIDER)
    result = simulate(cfg)
    runs = result.requests.set_index("request_id")
    decode = tuple(sorted(runs["instance"].unique().tolist()))
    decisions = regret(resolve(cfg), result.requests, RegretSettings(6, 60_000_000, pin_later=pin_later))
    assert len(decisions) == 6
    kinds = set()
    for d in decisions:
        assert d.members == decode
        assert runs.loc[d.request_id, "instance"] == d.members[d.chosen]
        assert d.outcomes[d.chosen].e2e_us / 1000.0 == pytest.approx(runs.loc[d.request_id, "e2e_ms"], abs=1e-9)
        kinds.add(runs.loc[d.request_id, "prefill_instance"] < 0)
    assert kinds == {True, False}  # both a local and a disaggregated request among the sampled ones


class _View:
    def __init__(self, members):
        import numpy as np

        self.members = np.array(members)


def test_a_pinned_replay_keeps_both_p_d_stages_of_a_later_request():
    """pin_later under P/D: a later request's prefill pick and its decode pick each stay the run's; a request
    the decider kept local has only its decode pick, and a stage without a pinned candidate is the policy's."""
    from distsim.regret.fork import Forks

    forks = Forks(set(), 1_000_000, {7: (0, 3), 8: (-1, 2)})
    forks.child = (0, Request(99, 0, 10, 1), 0, 0)
    prefill, decode = _View([0, 1]), _View([2, 3])
    assert forks._pin(Request(7, 0, 10, 1), prefill, 1) == 0
    assert forks._pin(Request(7, 0, 10, 1), decode, 0) == 1
    assert forks._pin(Request(8, 0, 10, 1), decode, 1) == 0
    assert forks._pin(Request(8, 0, 10, 1), prefill, 1) == 1  # local in the run: its prefill pick is free
    assert forks._pin(Request(9, 0, 10, 1), decode, 1) == 1  # not pinned


def test_the_runs_choices_under_p_d_are_both_instances():
    from distsim.regret.run import choices

    cfg = load_config(PD_DECIDER)
    result = simulate(cfg)
    pinned = choices(resolve(cfg), result.requests)
    runs = result.requests.set_index("request_id")
    assert len(pinned) == len(runs)
    for rid, (prefill, served) in pinned.items():
        assert (prefill, served) == (runs.loc[rid, "prefill_instance"], runs.loc[rid, "instance"])
    assert any(p < 0 for p, _ in pinned.values()) and any(p >= 0 for p, _ in pinned.values())
