"""cluster.engine.data_parallel_size: N engine replicas behind vLLM's balancer, per configured instance.

One configured instance with dp=2 gives the same results as a plain 2-instance cluster whose router
applies the balancer's rule (lowest 4 x waiting incl. in transit + running, as vLLM's DP client, then lowest index);
requests are conserved and every invariant holds after each event; GPUs and cost count tp x dp; bad
values are one ConfigError naming the key; a bench run's meta.json carries the value to validate.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import simkit
from simkit import FAKE_HW, tiny_model

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.fidelity.readers import read_run
from distsim.policies.base import PolicyParams, Router
from distsim.policies.settings import PolicyChoice
from distsim.request import Request
from distsim.resolve import resolve

FIX = Path(__file__).parent / "fixtures" / "fidelity"
MODEL = tiny_model(1000)


class BalancerRule(Router):
    """A cluster router with the DP balancer's rule, over live signals."""

    reads_signals = True

    def route(self, req, view) -> int:
        waiting = view.queue_depth() + view.in_transit()
        running = view.running()
        return min(range(view.n), key=lambda i: (4 * int(waiting[i]) + int(running[i]), i))


def _requests(seed: int, n: int = 300) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(200, n)).astype(int)
    return [Request(i, int(t[i]), int(rng.integers(10, 300)), int(rng.integers(2, 120))) for i in range(n)]


def _pool(count: int, dp: int, params) -> simkit.PoolSpec:
    return simkit.PoolSpec("p", count, "mixed", FAKE_HW, MODEL, 1, params, simkit.LinearLatency(100.0, 2.0, 5.0), "cluster", dp)


def _results(sim) -> dict[str, list]:
    return sim.recorder.table().sort_values("request_id").to_dict("list")


@pytest.mark.parametrize("seed, dispatch_ms", [(0, 0.0), (1, 0.0), (2, 0.3)])
def test_one_instance_with_dp2_equals_two_instances_behind_the_balancer_rule(seed, dispatch_ms):
    params = simkit.engine(max_num_seqs=4, total_kv_blocks=120)
    base = simkit.policy("round_robin", r_latency_ms=dispatch_ms)
    rule = dataclasses.replace(base, routing=PolicyChoice("dp_rule", BalancerRule, PolicyParams(), base.routing.latency_us))
    dp = simkit.run(_requests(seed), params, pools=[_pool(1, 2, params)], policy_cfg=base, check_every_event=True)
    plain = simkit.run(_requests(seed), params, pools=[_pool(2, 1, params)], policy_cfg=rule)
    a, b = _results(dp), _results(plain)
    assert a == b
    assert len(set(a["instance"])) == 2  # both replicas served
    assert dp.checks > 1000
    assert [i.dp_group for i in dp.cluster.instances] == [0, 0]
    assert [i.dp_group for i in plain.cluster.instances] == [0, 1]


def test_requests_are_conserved_and_invariants_hold_with_two_dp_groups():
    params = simkit.engine(max_num_seqs=4, total_kv_blocks=40)  # tight KV: preemptions
    reqs = _requests(5, 400)
    sim = simkit.run(reqs, params, pools=[_pool(2, 3, params)], routing="least_loaded", check_every_event=True)
    table = sim.recorder.table()
    assert len(table) == len(reqs) and sorted(table["request_id"]) == list(range(len(reqs)))
    assert sim.checks > 500
    assert [i.dp_group for i in sim.cluster.instances] == [0, 0, 0, 1, 1, 1]
    served = {int(i) for i in table["instance"]}
    assert served == set(range(6))


def _cfg(*extra: str):
    return load_config(["workload.num_requests=200", "cluster.instances=1", *extra])


def test_gpus_and_cost_count_tp_times_dp(tmp_path):
    one = simulate(_cfg("cluster.engine.tensor_parallel_size=2"))
    two = simulate(_cfg("cluster.engine.tensor_parallel_size=2", "cluster.engine.data_parallel_size=2"))
    assert "dp_group" not in one.instances.columns
    assert list(two.instances["dp_group"]) == [0, 0] and list(two.instances["gpus"]) == [2, 2]
    for result, gpus in ((one, 2), (two, 4)):  # summary.py's cost: sum of price x gpus over the rows
        inst = result.instances
        assert inst["gpus"].sum() == gpus
        assert (inst["price_usd_per_gpu_hour"] * inst["gpus"]).sum() == pytest.approx(gpus * inst["price_usd_per_gpu_hour"].iloc[0])
    assert two.requests["instance"].nunique() == 2


@pytest.mark.parametrize(
    "overrides",
    [
        ["cluster.engine.data_parallel_size=0"],
        ["cluster.engine.tensor_parallel_size=4", "cluster.engine.data_parallel_size=4"],
    ],
)
def test_a_bad_data_parallel_size_is_one_error_naming_the_key(overrides):
    with pytest.raises(ConfigError) as err:
        resolve(load_config(overrides))
    assert err.value.key == "cluster.engine.data_parallel_size"


def test_the_bench_reader_picks_data_parallel_size_from_meta_json(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(FIX / "tiny_bench", folder)
    meta = json.loads((folder / "meta.json").read_text())
    meta.setdefault("engine_kwargs", {})["data_parallel_size"] = 2
    meta["engine_kwargs"]["enable_expert_parallel"] = True
    (folder / "meta.json").write_text(json.dumps(meta))
    run = read_run(folder)
    assert run.engine.data_parallel_size == 2
    assert run.engine.overrides()["cluster.engine.data_parallel_size"] == 2
    assert run.engine.overrides()["cluster.engine.enable_expert_parallel"] is True
    plain = read_run(FIX / "tiny_bench").engine
    assert plain.data_parallel_size is None and plain.enable_expert_parallel is None
