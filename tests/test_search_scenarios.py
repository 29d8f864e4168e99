"""Drawn scenario families: the same draws for the same seed, training and held-out draws on either side of
the engine-size split, and every draw a scenario that resolves without a warning."""

from __future__ import annotations

import yaml

from distsim import load_config
from distsim.resolve import resolve
from distsim.search.scenarios import SPLIT_SEQS, config_yaml, families, main


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
    assert written["defaults"] == ["search", "_self_"]
    train = written["search"]["train"]
    assert {k: v for k, v in train.items() if v is not None} == families(2, 1, seed=1)["train"]
    assert train["chat"] is None  # conf/search.yaml's own families are dropped
    assert (tmp_path / "scenarios.yaml").read_text() == config_yaml(2, 1, 1)
