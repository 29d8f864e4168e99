"""SLO classes whose SLO allows shedding (workload.slo.classes[i].sheddable, distsim/metrics/shedding.py):
a request of such a class shed by admission is no miss for the capacity fitness; a shed request of any other
class still is; the early stop agrees with the runs to the end; without such a class nothing changes."""

from __future__ import annotations

import pytest

from distsim import load_config, simulate
from distsim.metrics.summary import rnd

# admission sheds at 2,048 queued prompt tokens, protecting only priority 2 (tenant 0): it sheds both classes
SHEDS = ["workload=tiered_sheddable", "workload.num_requests=240", "workload.arrival.rate_rps=60", "policy=token_limit",
         "policy.admission.protected_priority=2", "policy.admission.max_queued_tokens=2048"]  # fmt: skip
CAPACITY = ["fitness=capacity", "fitness.max_steps=6"]


def _run(*extra: str):
    return simulate(load_config([*SHEDS, *extra]))


def test_only_the_sheddable_class_s_shed_requests_count_as_met():
    result = _run()
    table, section = result.requests, result.summary["sheddable"]
    shed = table[(table["status"] == "rejected") & (table["instance"] < 0)]
    assert set(shed["slo_class"]) == {"batch", "interactive"}  # admission shed both classes
    assert section["classes"] == ["batch"]
    assert section["shed"] == int((shed["slo_class"] == "batch").sum()) > 0
    assert section["slo_attainment"] == rnd((int(table["met_slo"].sum()) + section["shed"]) / len(table))
    assert section["slo_attainment"] > result.summary["goodput"]["slo_attainment"]  # goodput itself unchanged
    assert not table.loc[shed.index, "met_slo"].any()  # requests.parquet still says they missed


def test_capacity_counts_a_sheddable_shed_as_no_miss_and_the_early_stop_agrees():
    plain = _run(*CAPACITY, "workload.slo.classes.1.sheddable=false").summary
    shed_ok = _run(*CAPACITY).summary
    assert "sheddable" not in plain
    assert shed_ok["capacity"]["requests_per_s"] > plain["capacity"]["requests_per_s"]  # shedding batch lifts it
    assert shed_ok["capacity"]["attainment_at_capacity"] >= 0.9
    to_the_end = _run(*CAPACITY, "fitness.stop_early=false").summary
    assert to_the_end["capacity"]["requests_per_s"] == shed_ok["capacity"]["requests_per_s"]


@pytest.mark.parametrize("value", ["maybe", "[1]"])
def test_a_bad_flag_is_refused_naming_the_key(value):
    from distsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"workload\.slo\.classes"):
        load_config(["workload=tiered_sheddable", f"workload.slo.classes.1.sheddable={value}"])
