"""Engine-normalised terminals: an expression over them scores two fleets that differ only in engine size
(and whose loads scale with it) identically, where the raw counts do not; and they read the engine's own
limits in a real run."""

from __future__ import annotations

import numpy as np
import pytest

from distsim import load_config, simulate
from distsim.policies.base import PolicyContext
from distsim.policies.expression.router import ExpressionParams, ExpressionRouter
from distsim.request import Request

NORMALISED = "-(queue_frac + running_frac + outstanding_frac) - queued_tokens_frac - kv_use + prefix_share"
RAW = "-(queue_depth + running + outstanding) - queued_tokens - kv_use + prefix_share"


class EngineView:
    """Four instances' signals on engines of ``size`` x (16 sequences, 2,048 batched tokens), their counts
    scaled with the engine: the same state relative to each engine's limits."""

    n = 4

    def __init__(self, size: int):
        self.arrays = {
            "queue_depth": np.array([0, 4, 8, 2]) * size, "running": np.array([16, 12, 4, 8]) * size,
            "queued_tokens": np.array([0, 1024, 4096, 512]) * size, "outstanding": np.array([16, 16, 12, 10]) * size,
            "in_transit": np.zeros(4, dtype=np.int64),
        }  # fmt: skip
        self.facts = {"block_size": np.full(4, 16), "max_num_seqs": np.full(4, 16 * size),
                      "max_num_batched_tokens": np.full(4, 2048 * size)}  # fmt: skip

    def __getattr__(self, name):
        if name in ("queue_depth", "running", "queued_tokens", "in_transit", "outstanding"):
            return lambda: self.arrays[name]
        raise AttributeError(name)

    def kv_utilization(self):
        return np.array([0.9, 0.5, 0.2, 0.4])

    def prefix_match(self, req):
        return np.array([4, 0, 0, 2])

    def signal_age_ms(self):
        return 0.0


def _scores(expression: str, view: EngineView) -> np.ndarray:
    ctx = PolicyContext(4, np.random.default_rng(0), 0, {"default_ttft_slo_ms": 500.0})
    router = ExpressionRouter(ExpressionParams(expression=expression), ctx)
    req = Request(1, 0, 512, 10, block_hashes=tuple(range(4)))
    router.route(req, view)
    return router.last_scores


@pytest.mark.parametrize("size", [2, 4, 16])
def test_a_normalised_expression_scores_engines_of_any_size_alike(size):
    np.testing.assert_array_equal(_scores(NORMALISED, EngineView(1)), _scores(NORMALISED, EngineView(size)))
    small, large = _scores(RAW, EngineView(1)), _scores(RAW, EngineView(size))
    assert not np.array_equal(small, large)  # the raw counts mean something else on the larger engine


@pytest.mark.parametrize("engine", [["cluster.engine.max_num_seqs=16"], ["cluster.engine.max_num_seqs=64"]])
def test_normalised_terminals_read_each_engines_own_limit(engine):
    """On a fleet of one engine size, queue over max_num_seqs ranks instances as the queue itself does:
    the same decisions, request by request (ties broken from the same stream)."""
    base = ["workload.num_requests=200", "cluster.instances=3", "workload.arrival.rate_rps=40", "policy=expression", *engine]
    raw = simulate(load_config([*base, "policy.routing.expression='-(queue_depth + running)'"])).requests
    frac = simulate(load_config([*base, "policy.routing.expression='-(queue_frac + running_frac)'"])).requests
    assert raw["instance"].tolist() == frac["instance"].tolist()
    assert raw["instance"].nunique() == 3
