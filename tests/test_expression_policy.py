"""The expression router: its language reads back what it prints, refuses what is outside the grammar with
one ConfigError naming policy.routing.expression, scores exactly as the built-ins it mirrors, and the numpy
module the search writes scores exactly as the router does."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.policies.base import PolicyContext
from distsim.policies.expression.codegen import module_source
from distsim.policies.expression.grammar import CONSTANTS, OPS, TERMINALS, Bool, Num
from distsim.policies.expression.router import ExpressionParams, ExpressionRouter
from distsim.policies.expression.tree import ExpressionError, Node, check_types, const, emit, parse
from distsim.request import Request
from distsim.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_requests=200", "cluster.instances=3", "workload.arrival.rate_rps=30"]
LEAST_LOADED = "-(queue_depth + running + in_transit)"
WEIGHTED = (  # llm-d's defaults as the weighted router adds them: kv 2/7, prefix 3/7, queue 2/7, load guard 8
    "0.2857142857142857 * (1 - kv_use) + 0.42857142857142855 * (prefix_share if not above_min(outstanding) > 8"
    " else 0) + 0.2857142857142857 * (1 - scale(queue_depth + in_transit))"
)


def trees(want: type, depth: int = 4) -> st.SearchStrategy[Node]:
    """Random well-typed trees of type ``want``."""
    leaves = [st.just(Node(t.name)) for t in TERMINALS if t.type is want]
    leaves.append(st.sampled_from([True, False]).map(const) if want is Bool else st.sampled_from(CONSTANTS).map(const))
    if want is Num:
        leaves.append(st.floats(0, 1e6, allow_nan=False).map(const))
    leaf = st.one_of(leaves)
    if depth == 0:
        return leaf
    ops = [o for o in OPS if o.ret is want]
    branch = st.sampled_from(ops).flatmap(
        lambda o: st.tuples(*(trees(t, depth - 1) for t in o.args)).map(lambda args, o=o: Node(o.name, args))
    )
    return st.one_of(leaf, branch)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(Num))
def test_parse_reads_back_what_emit_prints(tree):
    check_types(tree, Num)
    assert parse(emit(tree)) == tree


@pytest.mark.parametrize(
    "text, says",
    [
        ("queue_depth +", "is not an expression"),
        ("foo + 1", "unknown name 'foo'"),
        ("queue_depth < 1", "is a condition where a number is needed"),
        ("__import__('os').system('true')", "outside the grammar"),
        ("queue_depth ** 2", "outside the grammar"),
        ("min(running)", "min() takes 2"),
        ("1 < running < 3", "outside the grammar"),
        ("running if 1 else 2", "is a number where a condition is needed"),
        ("", "is empty"),
        ("1e400", "not a finite number"),
    ],
)
def test_a_bad_expression_is_one_config_error_naming_the_key(text, says):
    with pytest.raises(ExpressionError, match=None) as info:
        parse(text)
    assert says in str(info.value)
    cfg = load_config(["policy=expression", f"policy.routing.expression='{text}'" if "'" not in text else
                       f'policy.routing.expression="{text}"'])
    with pytest.raises(ConfigError) as err:
        resolve(cfg)
    assert err.value.key == "policy.routing.expression"


def test_the_cli_exits_2_on_a_bad_expression(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "distsim", "policy=expression", "policy.routing.expression='running +'",
         f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("distsim: config error: policy.routing.expression: ")
    assert "Traceback" not in proc.stderr


def _same_results(a: list[str], b: list[str]) -> None:
    ra, rb = simulate(load_config([*SMALL, *a])), simulate(load_config([*SMALL, *b]))
    ra.summary.pop("_derived", None), rb.summary.pop("_derived", None)
    assert ra.summary == rb.summary
    assert ra.requests["instance"].tolist() == rb.requests["instance"].tolist()


@pytest.mark.parametrize("signals", ["fresh", "stale_250ms"])
def test_least_loaded_as_an_expression_gives_identical_results(signals):
    expr = [f"signals={signals}", "policy=expression", f"policy.routing.expression='{LEAST_LOADED}'"]
    _same_results([f"signals={signals}", "policy=least_loaded"], expr)


def test_weighted_as_an_expression_gives_identical_results():
    expr = ["workload=prefix_heavy", "policy=expression", f"policy.routing.expression='{WEIGHTED}'"]
    _same_results(["workload=prefix_heavy", "policy=weighted"], expr)


def test_signal_age_is_zero_live_and_bounded_when_stale():
    for signals, bound in (("fresh", 0.0), ("stale_250ms", 250.0)):
        cfg = load_config([*SMALL, f"signals={signals}", "policy=expression", "policy.routing.expression=signal_age_ms",
                           "policy.trace_decisions=true"])
        ages = simulate(cfg).decisions["score"].to_numpy()
        assert ages.min() >= 0 and ages.max() <= bound * 1.5
        assert (ages.max() > 0) == (bound > 0)


class FakeView:
    """A view with given per-instance signals (what a router may read)."""

    def __init__(self, rng: np.random.Generator, n: int):
        self.n = n
        self.arrays = {k: rng.integers(0, 6, n).astype(np.int64) for k in ("queue_depth", "running", "queued_tokens", "in_transit", "outstanding")}
        self.kv = rng.random(n)
        self.match = rng.integers(0, 4, n)
        self.age = float(rng.integers(0, 300))
        self.facts = {"block_size": np.full(n, 16), "max_num_seqs": rng.integers(1, 64, n),
                      "max_num_batched_tokens": rng.integers(256, 8192, n)}  # fmt: skip
        self.held = rng.integers(0, 2, n).astype(np.float64)  # LoRA: which instances hold the adapter

    def __getattr__(self, name):
        if name in ("queue_depth", "running", "queued_tokens", "in_transit", "outstanding"):
            return lambda: self.arrays[name]
        raise AttributeError(name)

    def kv_utilization(self):
        return self.kv

    def prefix_match(self, req):
        return self.match

    def signal_age_ms(self):
        return self.age

    def adapter_resident(self, adapter):
        return self.held


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(trees(Num), st.integers(0, 2**32 - 1))
def test_the_written_module_scores_as_the_expression_router(tmp_path, tree, seed):
    text = emit(tree)
    path = tmp_path / "evolved_policy.py"
    path.write_text(module_source(tree, "evolved_policy"))
    module = _load(path)
    assert module.EXPRESSION == text
    rng = np.random.default_rng(seed)
    params = ExpressionParams(expression=text)
    ctx = lambda: PolicyContext(4, np.random.default_rng(seed), 0, {"default_ttft_slo_ms": 500.0})  # noqa: E731
    router, written = ExpressionRouter(params, ctx()), module.EvolvedPolicyRouter(params, ctx())
    for _ in range(5):
        view = FakeView(rng, 4)
        req = Request(1, 0, int(rng.integers(16, 4000)), 10, block_hashes=tuple(range(int(rng.integers(0, 5)))))
        assert router.route(req, view) == written.route(req, view)
        np.testing.assert_array_equal(router.last_scores, written.last_scores)
