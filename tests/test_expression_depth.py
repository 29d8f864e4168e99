"""Expression depth: one limit (MAX_DEPTH), checked by the parser on the tree the text becomes, below what
the router, the printer, the numpy module writer and the GP can build and evaluate (tree.py says where each
breaks). At the limit an expression runs end to end; one level deeper is one ConfigError naming the key."""

from __future__ import annotations

import ast
import importlib.util

import numpy as np
import pytest
from clikit import assert_user_error, run_module
from hypothesis import HealthCheck, given, settings
from test_expression_policy import SMALL, FakeView, trees

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.policies.base import PolicyContext
from distsim.policies.expression.codegen import module_source
from distsim.policies.expression.grammar import Num
from distsim.policies.expression.router import ExpressionParams, ExpressionRouter
from distsim.policies.expression.tree import MAX_DEPTH, ExpressionError, _depth, emit, parse
from distsim.request import Request
from distsim.resolve import resolve
from distsim.search.gp import GPOptimizer, GPSettings, to_node

# text of a tree exactly ``n`` levels deep, in the shapes that nest without parentheses
SHAPES = {
    "sum": lambda n: "queue_depth + " * n + "0",
    "negations": lambda n: "-" * n + "queue_depth",
    "choices": lambda n: "queue_depth if True else " * (n - 1) + "(queue_depth if True else 0)",
    "conditions": lambda n: "queue_depth if " + " and ".join(["True"] * n) + " else 0",
    "nots": lambda n: "queue_depth if " + "not " * (n - 1) + "True else 0",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_at_the_limit_every_stage_works(shape, tmp_path):
    text = SHAPES[shape](MAX_DEPTH)
    tree = parse(text)
    assert tree.height == MAX_DEPTH
    assert parse(emit(tree)) == tree  # the printer reads back
    ctx = lambda: PolicyContext(4, np.random.default_rng(0), 0, {"default_ttft_slo_ms": 500.0})  # noqa: E731
    router = ExpressionRouter(ExpressionParams(expression=text), ctx())
    path = tmp_path / "deep_policy.py"
    path.write_text(module_source(tree, "deep_policy"))  # the module the search writes
    spec = importlib.util.spec_from_file_location("deep_policy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.DeepPolicyRouter(ExpressionParams(expression=text), ctx())
    view, req = FakeView(np.random.default_rng(1), 4), Request(1, 0, 100, 10, block_hashes=(1, 2))
    assert router.route(req, view) == written.route(req, view)
    gp = GPOptimizer(4, 0, GPSettings())  # a seed expression this deep converts, whatever the GP's own bounds
    ind = gp.individual(tree)
    assert ind.height == MAX_DEPTH and to_node(ind) == tree


@pytest.mark.parametrize("shape", SHAPES)
def test_one_level_deeper_is_refused_naming_the_limit(shape):
    with pytest.raises(ExpressionError, match=rf"is nested {MAX_DEPTH + 1} levels deep \(at most {MAX_DEPTH}\)"):
        parse(SHAPES[shape](MAX_DEPTH + 1))


def test_a_run_at_the_limit_scores_and_one_deeper_is_a_config_error():
    at = ["policy=expression", f"policy.routing.expression='{SHAPES['sum'](MAX_DEPTH)}'"]
    assert simulate(load_config([*SMALL, *at])).summary["requests"]["completed"] > 0
    deeper = ["policy=expression", f"policy.routing.expression='{SHAPES['sum'](MAX_DEPTH + 1)}'"]
    with pytest.raises(ConfigError) as err:
        resolve(load_config(deeper))
    assert err.value.key == "policy.routing.expression" and f"at most {MAX_DEPTH}" in err.value.message


@pytest.mark.parametrize("text", ["queue_depth + " * 500 + "0", "-" * 600 + "queue_depth", "-" * 5000 + "queue_depth"])
def test_the_cli_refuses_a_deep_expression_in_one_line(text, tmp_path):
    proc = run_module("distsim", "policy=expression", f"policy.routing.expression='{text}'", f"hydra.run.dir={tmp_path}")
    line = assert_user_error(proc, 2, "config error: policy.routing.expression: ", f"at most {MAX_DEPTH}")
    assert proc.stderr.strip() == line


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(Num, depth=6))
def test_the_depth_counted_on_the_text_is_the_trees_height(tree):
    assert _depth(ast.parse(emit(tree), mode="eval").body) == tree.height
