"""Drawn scenario families: the same draws for the same seed, training and held-out draws on either side of
the engine-size split, and every draw a scenario that resolves without a warning."""

from __future__ import annotations

import yaml

from distsim import load_config
from distsim.config.compose import CONF_DIR
from distsim.resolve import resolve
from distsim.search import calibrate as cal
from distsim.search.scenarios import NAMED, SPLIT_SEQS, config_yaml, draw, families, main


def _seqs(overrides: str) -> int:
    return int(next(o for o in overrides.split() if o.startswith("cluster.engine.max_num_seqs=")).split("=")[1])


def test_draws_are_seeded_and_split_by_engine_size():
    drawn = families(6, 6, seed=3)
    assert drawn == families(6, 6, seed=3) and drawn != families(6, 6, seed=4)
    assert all(_seqs(o) <= SPLIT_SEQS for o in drawn["train"].values())
    assert all(_seqs(o) > SPLIT_SEQS for o in drawn["holdout"].values())


def test_every_draw_resolves():
    for part in families(4, 4, seed=0).values():
        for overrides in part.values():
            resolve(load_config(overrides.split(), config_name="search"))


def test_the_written_config_holds_the_families(tmp_path):
    assert main(["--train", "2", "--holdout", "1", "--seed", "1", "--out", str(tmp_path)]) == 0
    written = yaml.safe_load((tmp_path / "scenarios.yaml").read_text())
    assert written["defaults"] == ["search", {"override fitness": "capacity"}, "_self_"]
    train = written["search"]["train"]
    assert {k: v for k, v in train.items() if v is not None} == families(2, 1, seed=1)["train"]
    own = yaml.safe_load((CONF_DIR / "search.yaml").read_text())["search"]["train"]
    assert own and all(train[name] is None for name in own)  # conf/search.yaml's own families are dropped
    assert written["search"]["holdout"]["reasoning"] == " ".join(NAMED["reasoning"])  # the named held-out families
    assert (tmp_path / "scenarios.yaml").read_text() == config_yaml(families(2, 1, seed=1))


def test_the_named_families_resolve_with_capacity():
    for overrides in NAMED.values():
        scenario = resolve(load_config([*overrides, "fitness=capacity"], config_name="search"))
        assert scenario.fitness.kind == "capacity"


def _fake(caps: dict[int, tuple[float, bool]]):
    """A capacity measure that reads (capacity, at_roofline) from the request count, and counts its calls."""
    calls = []

    def measure(overrides, requests, policy):
        calls.append(requests)
        rps, roof = caps[requests]
        return {"requests_per_s": rps, "at_roofline": roof, "offered_rps": 10.0}

    return measure, calls


def test_a_burst_too_short_grows_until_capacity_tells():
    measure, calls = _fake({1000: (50.0, True), 2000: (20.0, False)})
    rows = []
    kept = cal.calibrate(["workload=default", "workload.num_requests=600"], rows, {}, measure)
    assert sorted(set(calls)) == [1000, 2000] and len(rows) == 2 * len(cal.POLICIES)
    # at the knee: the load factor 20 / 10 on the workload's 25 req/s, and SPAN_S seconds of arrivals there
    assert kept.overrides == ["workload=default", "workload.num_requests=2400", "workload.arrival.rate_rps=50"]


def test_a_draw_capacity_cannot_judge_is_redrawn():
    roofline, _ = _fake({n: (99.0, True) for n in (1000, 2000, 4000)})
    zero, _ = _fake({1000: (0.0, False)})
    assert cal.calibrate(["workload=default"], [], {}, roofline) is None
    assert cal.calibrate(["workload=default"], [], {}, zero) is None
    first = {"n": 0}

    def once_bad(overrides, requests, policy):  # the first draw meets the share at the roofline whatever its size
        first["n"] += 1
        bad = first["n"] <= 3 * len(cal.POLICIES)
        return {"requests_per_s": 99.0 if bad else 5.0, "at_roofline": bad, "offered_rps": 10.0}

    drawn, notes, table = cal.calibrated_families(1, 0, 2, draw, measure=once_bad)
    assert list(table.groupby("attempt")["kept"].all()) == [False, True]
    assert drawn["train"]["train_0"] != families(1, 0, seed=2)["train"]["train_0"]  # the second draw
