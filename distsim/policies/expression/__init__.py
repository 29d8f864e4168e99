"""Routing by a typed expression over per-instance signals (the ``expression`` router), the language's
grammar, parser and evaluator, and its emission as plain numpy code."""

from distsim.policies.expression import router  # noqa: F401  (registers the "expression" router)
