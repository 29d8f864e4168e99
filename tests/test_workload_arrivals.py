"""Arrival processes: statistical checks with tolerances of 4 standard errors of the sample."""

from __future__ import annotations

import numpy as np
import pytest

from distsim.events.rng import stream
from distsim.workload import build_workload
from distsim.workload.arrivals import MMPP, Schedule, build_arrivals
from distsim.workload.source import as_config


def arrival_cfg(**kw):
    return as_config({"arrival": kw}).arrival


def draw_times(n: int, seed: int = 3, block: int = 4096, **kw) -> np.ndarray:
    proc = build_arrivals(arrival_cfg(**kw), "workload.arrival", stream(seed, "test"))
    parts, left = [], n
    while left:
        parts.append(proc.next_times(min(block, left)))
        left -= len(parts[-1])
    return np.concatenate(parts)


def batch_se(x: np.ndarray, fn, batches: int = 64) -> float:
    """Standard error of ``fn`` over the whole sample, from the spread over equal batches."""
    vals = np.array([fn(b) for b in np.array_split(x, batches)])
    return float(vals.std(ddof=1) / np.sqrt(batches))


def cv(x):
    return x.std() / x.mean()


@pytest.mark.parametrize(
    "kw, mean, want_cv",
    [
        ({"process": "poisson", "rate_rps": 8.0}, 1 / 8.0, 1.0),
        ({"process": "gamma", "rate_rps": 5.0, "cv": 2.5}, 1 / 5.0, 2.5),
        ({"process": "gamma", "rate_rps": 20.0, "cv": 0.4}, 1 / 20.0, 0.4),
    ],
)
def test_renewal_gap_mean_and_cv(kw, mean, want_cv):
    n = 200_000
    gaps = np.diff(np.concatenate([[0.0], draw_times(n, **kw)]))
    assert (gaps >= 0).all()
    se_mean = want_cv * mean / np.sqrt(n)
    assert abs(gaps.mean() - mean) < 4 * se_mean
    assert abs(cv(gaps) - want_cv) < 4 * batch_se(gaps, cv)


def test_blocks_continue_without_gaps_or_overlap():
    a = draw_times(10_000, block=4096, process="poisson", rate_rps=3.0)
    b = draw_times(10_000, block=777, process="poisson", rate_rps=3.0)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_constant_is_exact_and_does_not_drift():
    src = build_workload(
        {"num_requests": 300_001, "arrival": {"process": "constant", "rate_rps": 3.0}}, seed=0
    )
    last = None
    for i, r in enumerate(src):
        if i % 100_000 == 0:
            assert r.arrival_us == round((i + 1) * 1_000_000 / 3)
        last = r
    assert last.arrival_us == round(300_001 * 1_000_000 / 3)  # 100000.333 s, to the microsecond


def test_poisson_microseconds_are_the_rounded_float_sums():
    """Times are summed in float seconds and rounded once, so they never drift from the exact sum."""
    n = 100_000
    proc = build_arrivals(
        arrival_cfg(process="poisson", rate_rps=1000.0), "k", stream(3, "workload/arrivals")
    )
    times = np.concatenate([proc.next_times(4096) for _ in range(-(-n // 4096))])[:n]
    src = build_workload({"num_requests": n, "arrival": {"process": "poisson", "rate_rps": 1000.0}}, seed=3)
    us = np.array([r.arrival_us for r in src])
    np.testing.assert_array_equal(us, np.rint(times * 1e6).astype(np.int64))
    assert (np.diff(us) >= 0).all()


def mmpp_rate_se(rates, dwell, horizon):
    """SE of N(T)/T for a 2-state MMPP: Var N(T) ~ T (mean rate + 2 p0 p1 (r0-r1)^2 / (a+b))."""
    (r0, r1), (d0, d1) = rates, dwell
    p0, p1 = d0 / (d0 + d1), d1 / (d0 + d1)
    mean = p0 * r0 + p1 * r1
    var_per_s = mean + 2 * p0 * p1 * (r0 - r1) ** 2 / (1 / d0 + 1 / d1)
    return mean, np.sqrt(var_per_s / horizon)


def test_mmpp_long_run_rate_is_dwell_weighted_mean():
    rates, dwell = [5.0, 40.0], [2.0, 0.5]
    times = draw_times(400_000, process="mmpp", rate_rps=None, rates_rps=rates, dwell_s=dwell)
    assert (np.diff(times) >= 0).all()
    horizon = times[-1]
    mean, se = mmpp_rate_se(rates, dwell, horizon)
    assert mean == pytest.approx(12.0)
    assert abs(len(times) / horizon - mean) < 4 * se
    proc = build_arrivals(arrival_cfg(process="mmpp", rates_rps=rates, dwell_s=dwell), "k", stream(0, "t"))
    assert isinstance(proc, MMPP) and proc.mean_rate() == pytest.approx(12.0)


def test_mmpp_is_burstier_than_poisson():
    times = draw_times(100_000, process="mmpp", rates_rps=[1.0, 30.0], dwell_s=[5.0, 5.0])
    counts = np.histogram(times, bins=np.arange(0, times[-1], 1.0))[0]
    assert counts.var() / counts.mean() > 5  # a Poisson process has index of dispersion 1


def test_mmpp_three_states():
    rates, dwell = [2.0, 10.0, 0.0], [1.0, 1.0, 2.0]
    times = draw_times(200_000, process="mmpp", rates_rps=rates, dwell_s=dwell)
    want = (2 + 10 + 0) / 4.0
    # generous: 3-state variance is not in closed form here; 5% is > 10 SE of a Poisson count
    assert len(times) / times[-1] == pytest.approx(want, rel=0.05)


def test_schedule_rates_per_segment():
    rates, durs = [2.0, 0.0, 20.0], [50.0, 30.0, 20.0]
    times = draw_times(60_000, process="schedule", rates_rps=rates, durations_s=durs)
    assert (np.diff(times) >= 0).all()
    cycles = int(times[-1] // 100.0)
    t = times[times < cycles * 100.0] % 100.0
    for (lo, hi), r in zip([(0, 50), (50, 80), (80, 100)], rates, strict=True):
        count = ((t >= lo) & (t < hi)).sum()
        expect = r * (hi - lo) * cycles
        assert abs(count - expect) <= 4 * np.sqrt(max(expect, 1.0))
    proc = build_arrivals(
        arrival_cfg(process="schedule", rates_rps=rates, durations_s=durs), "k", stream(0, "t")
    )
    assert isinstance(proc, Schedule) and proc.mean_rate() == pytest.approx((100 + 400) / 100)


def test_schedule_without_repeat_ends_on_a_zero_rate():
    src = build_workload(
        {
            "num_requests": 10_000,
            "arrival": {
                "process": "schedule",
                "rates_rps": [50.0, 0.0],
                "durations_s": [10.0, 5.0],
                "repeat": False,
            },
        },
        seed=1,
    )
    reqs = list(src)
    assert 0 < len(reqs) < 10_000
    assert reqs[-1].arrival_us < 10_000_000
    assert abs(len(reqs) - 500) < 4 * np.sqrt(500)


def test_duration_and_count_limits():
    by_count = list(build_workload({"num_requests": 123, "arrival": {"rate_rps": 50.0}}, seed=2))
    assert len(by_count) == 123
    by_time = list(
        build_workload({"num_requests": None, "duration_s": 20.0, "arrival": {"rate_rps": 50.0}}, seed=2)
    )
    assert by_time[-1].arrival_us <= 20_000_000
    assert abs(len(by_time) - 1000) < 4 * np.sqrt(1000)
    both = list(
        build_workload({"num_requests": 100_000, "duration_s": 3.0, "arrival": {"rate_rps": 50.0}}, seed=2)
    )
    assert [r.arrival_us for r in both] == [r.arrival_us for r in by_time[: len(both)]]
    assert both[-1].arrival_us <= 3_000_000
    fewer = list(
        build_workload({"num_requests": 10, "duration_s": 3.0, "arrival": {"rate_rps": 50.0}}, seed=2)
    )
    assert len(fewer) == 10
    ids = [r.request_id for r in by_time]
    assert ids == list(range(len(by_time)))
