"""The ranking's statistics: t-intervals, the paired test against the best, Holm, and what counts as tied."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from distsim.runner.ranking import compare, holm, labels, mean_ci, rank_configs
from distsim.runner.table import format_ranking


def results(
    fitness: dict[str, list[float]], status: dict[tuple[str, int], str] | None = None
) -> pd.DataFrame:
    rows = []
    for c, values in fitness.items():
        for seed, value in enumerate(values):
            st_ = (status or {}).get((c, seed), "ok")
            rows.append(
                {
                    "job": len(rows),
                    "config": f"policy={c} cluster.instances=2",
                    "policy": c,
                    "seed": seed,
                    "status": st_,
                    "fitness": value if st_ == "ok" else math.nan,
                    "ttft_ms.p99": 10.0,
                    "tpot_ms.p99": 5.0,
                    "goodput.requests_per_s": value,
                }
            )
    return pd.DataFrame(rows)


def test_mean_ci_is_the_t_interval():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    mean, low, high = mean_ci(x)
    ref = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert mean == x.mean() and math.isclose(low, ref[0]) and math.isclose(high, ref[1])
    assert math.isnan(mean_ci(np.array([3.0]))[1])


def test_pairing_by_seed_finds_a_small_consistent_difference_that_unpaired_means_cannot():
    noise = np.array([0.0, 5.0, -3.0, 8.0, 1.0, -6.0])  # shared per-seed noise, large
    best = pd.Series(100 + noise)
    other = pd.Series(99.5 + noise + np.array([0.01, -0.02, 0.0, 0.02, -0.01, 0.0]))
    comp = compare(best, other)
    assert comp.test == "paired-t" and comp.n == 6
    assert comp.p_value < 0.001 and comp.diff_high < 0
    assert stats.ttest_ind(best, other).pvalue > 0.5  # the unpaired view sees nothing
    assert math.isclose(comp.p_value, stats.ttest_rel(other, best).pvalue)


def test_zero_spread_and_too_few_seeds():
    same = pd.Series([1.0, 2.0, 3.0])
    assert compare(same, same).p_value == 1.0
    assert compare(same, same - 0.5).p_value == 0.0
    assert compare(pd.Series([1.0], index=[0]), pd.Series([0.5], index=[1])).test == "none"
    welch = compare(pd.Series([1.0, 2.0], index=[0, 1]), pd.Series([0.0, 1.0], index=[2, 3]))
    assert welch.test == "welch-t" and 0 < welch.p_value < 1


def test_holm_adjustment():
    adjusted = holm([0.01, 0.04, 0.03, math.nan])
    assert all(math.isclose(a, b) for a, b in zip(adjusted[:3], [0.03, 0.06, 0.06])) and math.isnan(
        adjusted[3]
    )
    assert holm([0.5]) == [0.5]


def test_rank_marks_the_winner_the_ties_and_the_clearly_worse():
    table = rank_configs(
        results(
            {
                "a": [10.0, 12.0, 9.0, 11.0],
                "b": [10.0, 12.1, 8.9, 11.0],  # indistinguishable from a
                "c": [5.0, 6.0, 4.0, 5.5],  # clearly worse
            }
        )
    )
    by = table.set_index("policy")
    assert list(table.columns[:7]) == [
        "config",
        "n",
        "fitness_mean",
        "fitness_ci_low",
        "fitness_ci_high",
        "rank",
        "tied_with_best",
    ]
    assert by.loc["a", "rank"] == 1 and by.loc["a", "tied_with_best"]
    assert by.loc["b", "tied_with_best"] and not by.loc["c", "tied_with_best"]
    assert by.loc["c", "rank"] == 3 and by.loc["c", "p_holm"] < 0.05
    assert {"ttft_ms.p99_mean", "tpot_ms.p99_mean", "goodput.requests_per_s_mean"} <= set(table.columns)
    assert by.loc["a", "label"] == "policy=a"
    text = format_ranking(table)
    assert "policy=a" in text and "[" in text and "common overrides: cluster.instances=2" in text


def test_failed_jobs_are_left_out_and_counted():
    table = rank_configs(
        results(
            {"a": [1.0, 2.0, 3.0], "b": [0.0, 0.0, 0.0]},
            {("a", 2): "failed", ("b", 0): "failed", ("b", 1): "failed", ("b", 2): "failed"},
        )
    )
    by = table.set_index("policy")
    assert by.loc["a", "n"] == 2 and by.loc["a", "n_failed"] == 1
    assert by.loc["b", "n"] == 0 and pd.isna(by.loc["b", "rank"]) and not by.loc["b", "tied_with_best"]
    assert "1 failed" in format_ranking(table)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=9, max_size=9), st.randoms())
def test_ranking_does_not_depend_on_row_order(values, rnd):
    frame = results({"a": values[:3], "b": values[3:6], "c": values[6:]})
    shuffled = frame.sample(frac=1, random_state=rnd.randint(0, 10**6))
    pd.testing.assert_frame_equal(rank_configs(frame), rank_configs(shuffled))


def test_labels_strip_what_all_configs_share():
    assert labels(["a=1 b=2", "a=1 b=3"]) == {"a=1 b=2": "b=2", "a=1 b=3": "b=3"}
    assert labels([""]) == {"": "(defaults)"}


def test_a_configuration_with_an_unmeasured_fitness_is_not_ranked_and_is_named():
    """A capacity run that measured nothing has a null fitness (not 0.0); its configuration gets no rank,
    no mean over its other seeds, and the printed table says which one and why."""
    table = results({"a": [1.0, 1.1, 0.9], "b": [5.0, math.nan, 5.2], "c": [0.5, 0.6, 0.4]})
    table["capacity.not_measured"] = None
    table.loc[4, "capacity.not_measured"] = "no request arrived in the measurement window"
    ranked = rank_configs(table).set_index("policy")
    assert pd.isna(ranked.loc["b", "rank"]) and math.isnan(ranked.loc["b", "fitness_mean"])
    assert ranked.loc["b", "n"] == 0 and not ranked.loc["b", "tied_with_best"]
    assert ranked.loc["a", "rank"] == 1 and ranked.loc["c", "rank"] == 2  # b's 5.0 and 5.2 would have won
    assert ranked.loc["b", "not_ranked"] == "fitness not measured in 1 of 3 jobs: no request arrived in the measurement window"
    assert pd.isna(ranked.loc["a", "not_ranked"])
    text = format_ranking(rank_configs(table))
    assert "not ranked: policy=b: fitness not measured in 1 of 3 jobs" in text
