"""instances.parquet's time-weighted KV utilisation (mean, p50, p90, p99, max over the run) and the peak
wait queue and running batch per instance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.metrics.occupancy import level_durations, time_weighted
from distsim.probe import RunProbe
from distsim.request import Request

COLUMNS = ["kv_utilization_p50", "kv_utilization_p90", "kv_utilization_p99", "kv_utilization_max"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), min_size=0, max_size=30), st.integers(0, 20), st.integers(1, 100))
def test_the_time_weighting_is_the_levels_repeated_for_each_microsecond_they_held(changes, start, length):
    """A step function's levels, each repeated once per microsecond it held within [start, end): numpy's
    inverted-CDF percentiles and plain mean of those samples."""
    times = np.cumsum([dt for dt, _ in changes]).astype(np.int64)
    levels = np.asarray([v for _, v in changes], dtype=np.int64)
    end = start + length
    values, durations = level_durations(times, levels, start, end)
    got = time_weighted(values, durations)
    samples = np.asarray([levels[times <= t][-1] if (times <= t).any() else 0 for t in range(start, end)], dtype=float)
    assert got["mean"] == pytest.approx(samples.mean())
    assert got["max"] == samples.max()
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert got[key] == np.percentile(samples, q, method="inverted_cdf"), key


def test_no_time_gives_nan():
    values, durations = level_durations(np.array([5]), np.array([3]), 10, 10)
    assert all(np.isnan(v) for v in time_weighted(values, durations).values())


@pytest.mark.parametrize("overrides", [[], ["cluster=pd_disagg"], ["sim.fast_forward=false"]], ids=["mixed", "pd", "stepwise"])
def test_the_utilisation_percentiles_are_ordered_and_bounded_by_the_peak(overrides):
    inst = simulate(load_config(["workload.num_requests=150", *overrides])).instances
    values = inst[COLUMNS].to_numpy()
    assert (np.diff(values, axis=1) >= 0).all()
    assert (values >= 0).all() and (values <= 1).all()
    if "cluster=pd_disagg" not in overrides:  # a P/D prefill engine's held blocks can leave between step ends
        assert (inst["kv_utilization_max"] <= inst["peak_kv_utilization"] + 1e-12).all()
    assert (inst["kv_utilization_mean"] <= inst["kv_utilization_max"]).all()
    assert (inst["kv_utilization_mean"] > 0).all()


def test_the_mean_is_the_blocks_in_use_integrated_over_the_run_as_every_event_sees_them():
    """Stepwise (no fast-forward): sampled after every event through the loop's public hook, the blocks in
    use integrate to the same mean."""
    samples: list[tuple[int, int]] = []

    class EveryEvent(RunProbe):
        def built(self, world, loop, recorder):
            loop.after_event = lambda now: samples.append((now, world.instances[0].kv.used()))

    cfg = load_config(["workload.num_requests=60", "cluster.instances=1", "sim.fast_forward=false"])
    result = simulate(cfg, probe=EveryEvent())
    times = np.asarray([t for t, _ in samples])
    used = np.asarray([u for _, u in samples])
    last = np.r_[times[1:] != times[:-1], True]  # the level after the last event at each instant
    times, used = times[last], used[last]
    start = int(round(result.requests["arrival_ms"].min() * 1000))
    values, durations = level_durations(times, used, start, int(times[-1]))
    total = result.instances["total_kv_blocks"][0]
    expected = np.dot(values, durations) / (times[-1] - start) / total
    assert result.instances["kv_utilization_mean"][0] == pytest.approx(expected)


@pytest.mark.parametrize("overrides", [[], ["cluster=pd_disagg"], ["workload=fixed", "workload.arrival.rate_rps=30"]],
                         ids=["default", "pd", "fixed"])
def test_fast_forwarding_gives_the_columns_stepping_gives(overrides):
    """A fast-forwarded run takes its later steps' blocks at its end; the notes give them back to the step
    boundaries, so every column (KV and memory use, the peaks) is stepping's, as sim.fast_forward promises."""
    keys = ["workload.num_requests=150", *overrides]
    fast, stepped = simulate(load_config(keys)), simulate(load_config([*keys, "sim.fast_forward=false"]))
    assert fast.summary["sim"]["events"] < stepped.summary["sim"]["events"]  # it did fast-forward
    assert fast.instances.equals(stepped.instances)


def test_a_burst_fills_the_queue_and_the_batch_to_their_peaks():
    cfg = load_config(["cluster.instances=1", "cluster.engine.max_num_seqs=4"])
    inst = simulate(cfg, [Request(i, 0, 100, 20) for i in range(10)]).instances
    assert inst["peak_running"][0] == 4
    assert inst["peak_waiting"][0] == 10  # all ten wait when the first step is planned


def test_memory_utilisation_is_the_resident_bytes_plus_the_blocks_in_use_and_a_full_cache_fills_vllms_share():
    """Llama-3.1-8B on an H100 at gpu_memory_utilization 0.9: the weights and the activation reserve are held
    from the start; a full KV cache would bring the GPU to 0.9 of its memory (less the last partial block)."""
    from distsim.catalog import load_hardware
    from distsim.catalog.models import load_model

    inst = simulate(load_config(["workload.num_requests=100"])).instances
    hw, model = load_hardware("H100"), load_model("llama-3.1-8b")
    block_bytes = model.kv_bytes_per_token_per_gpu(1) * 16
    resident = model.weight_bytes_per_gpu(1) + 0.05 * hw.memory_bytes
    for stat in ("mean", "p50", "p90", "p99", "max"):
        kv_bytes = inst[f"kv_utilization_{stat}"] * inst["total_kv_blocks"] * block_bytes
        assert np.allclose(inst[f"memory_utilization_{stat}"], (resident + kv_bytes) / hw.memory_bytes)
    full = (resident + inst["total_kv_blocks"] * block_bytes) / hw.memory_bytes
    assert ((full <= 0.9) & (full > 0.9 - block_bytes / hw.memory_bytes)).all()
