"""The front end outside the engine: ingestion before the engine queues a request, a per-token lag after.

On one instance with the linear step model (base 100 us, 2 us per prefill token, 5 us per decode token)
a lone request of P prompt and D output tokens takes (100 + 2P) for its prefill step and (100 + 5) for
each later token. The front end adds ingest = request_us + per_input_token_us x P before that, and
per_output_token_us to every token's arrival at the client: TTFT and E2E grow by ingest + lag, TPOT not.
"""

from __future__ import annotations

import pytest
from simkit import run

from distsim import load_config, simulate
from distsim.cluster.settings import FrontendSettings
from distsim.errors import ConfigError
from distsim.request import Request

P, D = 50, 5  # the prompt fits one step (simkit: 64 batched tokens)
ENGINE_TTFT_US = 100 + 2 * P
ENGINE_E2E_US = ENGINE_TTFT_US + (D - 1) * (100 + 5)


def _row(frontend: FrontendSettings | None):
    return run([Request(0, 0, P, D)], frontend=frontend).recorder.table().iloc[0]


def test_without_a_front_end_the_client_sees_the_engine_times():
    row = _row(None)
    assert row["ttft_ms"] * 1000 == ENGINE_TTFT_US and row["e2e_ms"] * 1000 == ENGINE_E2E_US


def test_ingestion_and_the_token_lag_add_to_ttft_and_e2e_but_not_to_tpot():
    front = FrontendSettings(request_us=1000.0, per_input_token_us=3.0, per_output_token_us=250.0)
    row, base = _row(front), _row(None)
    extra_us = 1000 + 3 * P + 250
    assert row["ttft_ms"] * 1000 == ENGINE_TTFT_US + extra_us
    assert row["e2e_ms"] * 1000 == ENGINE_E2E_US + extra_us
    assert row["tpot_ms"] == base["tpot_ms"]
    assert row["queue_ms"] * 1000 == 1000 + 3 * P  # the engine first schedules it after ingestion


def test_the_front_end_is_configured_under_cluster_frontend_and_checked():
    overrides = ["workload=fixed", "workload.num_requests=50", "cluster.frontend.request_us=15000"]
    base = simulate(load_config(["workload=fixed", "workload.num_requests=50", "cluster.frontend.request_us=0"])).requests
    with_front = simulate(load_config(overrides)).requests
    assert (with_front["ttft_ms"] - base["ttft_ms"]).min() >= 15.0 - 1e-9
    with pytest.raises(ConfigError) as err:
        simulate(load_config(["cluster.frontend.per_output_token_us=-1"]))
    assert err.value.key == "cluster.frontend.per_output_token_us"
