"""Agreement with queueing theory and with the linear model's closed forms."""

import numpy as np
from simkit import engine, run

from distsim.instance.latency.linear import LinearLatency
from distsim.request import Request


def test_service_time_is_exact_under_the_linear_model():
    base, pp, pd_ = 1000.0, 2.0, 30.0
    P, D = 300, 50
    df = run([Request(0, 0, P, D)], engine(max_num_seqs=1, max_num_batched_tokens=512, block_size=16, total_kv_blocks=100), LinearLatency(base, pp, pd_)).recorder.table()
    expected_us = (base + pp * P) + (D - 1) * (base + pd_)
    assert df["e2e_ms"].item() * 1000 == expected_us
    assert df["ttft_ms"].item() * 1000 == base + pp * P
    assert df["tpot_ms"].item() * 1000 == base + pd_


def _poisson(seed, n, rate_per_s, P, D):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1e6 / rate_per_s, size=n)).astype(np.int64)
    return [Request(i, int(t[i]), P, D) for i in range(n)]


def test_md1_mean_wait_matches_pollaczek_khinchine():
    """max_num_seqs=1, fixed lengths, Poisson arrivals split at random: each instance is M/D/1 with
    mean wait W = rho * S / (2 (1 - rho))."""
    base, pp, pd_ = 500.0, 1.0, 50.0
    P, D = 100, 20
    service_us = (base + pp * P) + (D - 1) * (base + pd_)  # 11,050 us
    instances, rho = 4, 0.7
    rate = instances * rho / (service_us / 1e6)
    reqs = _poisson(11, 120_000, rate, P, D)
    params = engine(max_num_seqs=1, max_num_batched_tokens=256, block_size=16, total_kv_blocks=1000, enable_prefix_caching=False)
    df = run(reqs, params, LinearLatency(base, pp, pd_), instances=instances, routing="random").recorder.table()
    # the realised per-instance load, from the realised arrivals
    span_s = (df["arrival_ms"].max() - df["arrival_ms"].min()) / 1e3
    lam = len(df) / instances / span_s
    rho_hat = lam * service_us / 1e6
    theory_ms = rho_hat * service_us / (2 * (1 - rho_hat)) / 1e3
    measured = df["queue_ms"].mean()
    assert abs(measured - theory_ms) / theory_ms < 0.04, (measured, theory_ms)
    # e2e = wait + service exactly, request by request
    assert np.allclose(df["e2e_ms"] - df["queue_ms"], service_us / 1e3)


def test_little_law_holds_for_the_batched_instance():
    """L = lambda W: the time-average number in the system equals arrival rate x mean time in system."""
    reqs = _poisson(3, 20_000, 40.0, 200, 60)
    params = engine(max_num_seqs=32, max_num_batched_tokens=512, block_size=16, total_kv_blocks=4000)
    df = run(reqs, params, LinearLatency(2000.0, 0.5, 100.0)).recorder.table()
    t0, t1 = df["arrival_ms"].min(), df["completion_ms"].max()
    # time-average number in system from the request intervals
    area = (df["completion_ms"] - df["arrival_ms"]).sum()
    L = area / (t1 - t0)
    lam = len(df) / (t1 - t0)
    assert abs(L - lam * df["e2e_ms"].mean()) < 1e-6 * L
