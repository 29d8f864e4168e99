"""The ``expression`` router: scores every candidate with a typed expression over its signals and
routes to the highest score, ties broken from the router's own stream (as every scoring router here).

``policy.routing.expression`` holds the expression's readable form (distsim.policies.expression.tree);
a text outside the grammar, or of the wrong type, is one ConfigError naming that key. The policy search
(``search.algorithm=gp``) evolves these expressions; conf/policy/expression.yaml is its base.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, PolicyParams, Router
from distsim.policies.choice import pick_max
from distsim.policies.expression.evaluate import Signals, compile_tree, scores
from distsim.policies.expression.grammar import TERMINAL
from distsim.policies.expression.tree import ExpressionError, Node, parse


@dataclass(frozen=True)
class ExpressionParams(PolicyParams):
    expression: str | None = None  # the score, e.g. "-(queue_depth + running + in_transit)"
    prefix_index_blocks: int | None = None  # as prefix_affinity's (read when the expression reads prefixes)

    def tree(self, key: str = "policy.routing") -> Node:
        if self.expression is None:
            raise ConfigError(f"{key}.expression", "is not set: the expression router needs a score to maximise")
        try:
            return parse(self.expression)
        except ExpressionError as err:
            raise ConfigError(f"{key}.expression", str(err)) from None

    def check(self, key: str) -> None:
        if self.prefix_index_blocks is not None and self.prefix_index_blocks < 1:
            raise ConfigError(f"{key}.prefix_index_blocks", f"must be >= 1 or null (got {self.prefix_index_blocks})")
        self.tree(key)


def _sources(tree: Node) -> set[str]:
    return {TERMINAL[name].source for name in tree.terminals()}


@ROUTERS.register("expression")
class ExpressionRouter(Router):
    Params = ExpressionParams

    def __init__(self, params: ExpressionParams, ctx):
        super().__init__(params, ctx)
        self.tree = params.tree()
        self.compiled = compile_tree(self.tree)
        self.reads_signals = "signal" in _sources(self.tree)
        self.default_slo = ctx.extra.get("default_ttft_slo_ms")

    @classmethod
    def reads_prefix_index(cls, params: ExpressionParams) -> bool:
        return "prefix" in _sources(params.tree())

    def route(self, req, view) -> int:
        total = scores(self.compiled, Signals(req, view, self.default_slo), view.n)
        self.last_scores = total
        return pick_max(total, self.ctx.rng)
