"""The router's interface beyond a plain position: a priority with the decision (``Route``), honoured by the
priority scheduler, and a policy's own figures in summary.json's ``policy.metrics``."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from simkit import engine, policy, run

from distsim.config.compose import load_config
from distsim.errors import ConfigError
from distsim.instance.latency.linear import LinearLatency
from distsim.policies.base import PolicyParams, Route, Router, reports_metrics
from distsim.policies.metrics_feature import checked, figures_of
from distsim.policies.settings import PolicyChoice
from distsim.policies.short_prompt_priority import ShortPromptPriority
from distsim.request import Request
from distsim.simulate import simulate

LATENCY = LinearLatency(2000.0, 5.0, 200.0)
SHORT, LONG = 40, 400


def burst(n: int = 60) -> list[Request]:
    """Short and long prompts alternating, faster than one engine serves them, so a queue forms."""
    return [Request(i, i * 500, SHORT if i % 2 else LONG, 20) for i in range(n)]


class ShortFirst(Router):
    """Round robin, short prompts sent with priority 1 (higher first), long ones with 0."""

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.next = 0

    def route(self, req, view):
        self.next = (self.next + 1) % view.n
        return Route(self.next, 1 if req.prompt_tokens < 100 else 0)


class Plain(ShortFirst):
    """The same choices as plain positions: the workload's priorities stay."""

    def route(self, req, view):
        return super().route(req, view).target


class KeepsPriority(ShortFirst):
    """The same choices as Routes carrying the request's own priority: a no-op priority."""

    def route(self, req, view):
        return Route(super().route(req, view).target, req.priority)


class BadPriority(ShortFirst):
    def route(self, req, view):
        return Route(0, 0.5)


def settings_with(cls: type[Router]):
    return replace(policy("round_robin"), routing=PolicyChoice("test", cls, PolicyParams()))


def table(cls: type[Router], scheduler: str = "priority", instances: int = 1):
    params = engine(max_num_seqs=4, max_num_batched_tokens=128, total_kv_blocks=512, scheduler=scheduler)
    return run(burst(), params, LATENCY, instances=instances, policy_cfg=settings_with(cls)).recorder.table()


def mean_ttft(t, tokens: int) -> float:
    return float(t[t["input_tokens"] == tokens]["ttft_ms"].mean())


def test_a_routers_priority_makes_the_priority_scheduler_serve_short_prompts_first():
    ranked, plain = table(ShortFirst), table(Plain)
    assert (ranked["instance"].to_numpy() == plain["instance"].to_numpy()).all()  # the same instances
    assert mean_ttft(ranked, SHORT) < 0.8 * mean_ttft(plain, SHORT)  # the short ones jump the queue
    assert mean_ttft(ranked, LONG) > mean_ttft(plain, LONG)  # at the long ones' expense


def test_a_routers_priority_changes_nothing_under_fcfs():
    assert table(ShortFirst, "fcfs").equals(table(Plain, "fcfs"))


def test_a_route_with_the_requests_own_priority_is_the_plain_position():
    assert table(KeepsPriority).equals(table(Plain))


def test_a_priority_that_is_not_an_integer_is_one_error_naming_the_router():
    with pytest.raises(ConfigError, match=r"policy\.routing: BadPriority\.route returned a priority of 0\.5"):
        table(BadPriority)


def test_a_hedged_copy_goes_where_a_route_points_and_keeps_its_priority():
    node_policy = settings_with(ShortFirst)
    hedged = replace(node_policy, hedge=replace(node_policy.hedge, delay_us=1_000, max_copies=2))
    params = engine(max_num_seqs=4, max_num_batched_tokens=128, total_kv_blocks=512, scheduler="priority")
    t = run(burst(), params, LATENCY, instances=3, policy_cfg=hedged).recorder.table()
    assert sorted(t["request_id"]) == list(range(60))


# ---- policy.metrics ---------------------------------------------------------------------------------------

BASE = ["workload.num_requests=200", "cluster.instances=2", "cluster.engine.scheduler=priority"]


def test_a_policys_figures_land_in_summary_under_policy_metrics():
    result = simulate(load_config([*BASE, "policy=short_prompt_priority"]))
    figures = result.summary["policy"]["metrics"]["routing"]
    assert figures["decisions"] == 200  # every request routed once, none rejected
    requests = result.requests
    assert figures["mean_prompt_tokens"] == pytest.approx(requests["input_tokens"].mean(), abs=1e-3)
    assert 0 < figures["prioritised"] < 200
    assert set(result.summary["policy"]["metrics"]) == {"routing"}  # admission "always" keeps none


def test_a_run_whose_policies_keep_no_figures_has_no_policy_section():
    assert not reports_metrics(Plain)
    assert "policy" not in simulate(load_config([*BASE, "policy=least_loaded"])).summary


def test_short_prompt_priority_routes_where_least_loaded_does():
    a = simulate(
        load_config([*BASE, "policy=short_prompt_priority", "cluster.engine.scheduler=fcfs"])
    ).requests
    b = simulate(load_config([*BASE, "policy=least_loaded", "cluster.engine.scheduler=fcfs"])).requests
    assert (a["instance"].to_numpy() == b["instance"].to_numpy()).all()
    assert (a["ttft_ms"].to_numpy() == b["ttft_ms"].to_numpy()).all()  # fcfs ignores the priority


def test_a_figure_that_is_not_a_finite_number_is_one_error_naming_the_policy(monkeypatch):
    monkeypatch.setattr(ShortPromptPriority, "metrics", lambda self: {"score": math.nan})
    with pytest.raises(
        ConfigError, match=r"policy\.routing: ShortPromptPriority\.metrics\(\)\['score'\] is nan"
    ):
        simulate(load_config([*BASE, "policy=short_prompt_priority"]))


@pytest.mark.parametrize(
    "figures, says",
    [
        ([1, 2], "returned list"),
        ({"a": "x"}, r"\['a'\] is 'x'"),
        ({"a": True}, r"\['a'\] is True"),
        ({"a": {"b": math.inf}}, r"\['b'\] is inf"),
        ({1: 2.0}, "the name 1 is not a string"),
    ],
)
def test_bad_figures_are_refused(figures, says):
    with pytest.raises(ConfigError, match=says):
        checked(figures, "P", "admission")


def test_figures_are_plain_json_numbers_by_role():
    class Counting(Router):
        def route(self, req, view):
            return 0

        def metrics(self):
            return {"n": np.int64(3), "share": np.float64(0.25), "per": {"x": 1}}

    class Cluster:
        router = Counting(PolicyParams(), None)
        admission = decode_router = None

    got = figures_of(Cluster())
    assert got == {"routing": {"n": 3, "share": 0.25, "per": {"x": 1}}}
    assert type(got["routing"]["n"]) is int and type(got["routing"]["share"]) is float
