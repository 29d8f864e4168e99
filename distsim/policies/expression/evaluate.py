"""Evaluating an expression tree over the candidates of one routing decision, with numpy.

A tree compiles once into nested closures; a decision reads each terminal it uses once (lazily) and
runs a few array operations per node. The score is a float per candidate; NaN (inf - inf, say) scores
-inf, so it never wins over a number.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from distsim.policies.expression.grammar import OP
from distsim.policies.expression.tree import Node
from distsim.request import Request

Compiled = Callable[["Signals"], np.ndarray]


class Signals(dict):
    """The terminals' values for one decision, read from the view on first use."""

    def __init__(self, req: Request, view, default_ttft_slo_ms: float):
        super().__init__()
        self.req, self.view, self.default_slo = req, view, default_ttft_slo_ms

    def __missing__(self, name: str):
        value = self[name] = _READ[name](self)
        return value

    def match(self) -> np.ndarray:
        """Blocks of the request's prompt each candidate holds (the router's prefix index)."""
        if "_match" not in self:
            hashes = self.req.block_hashes
            self["_match"] = self.view.prefix_match(self.req).astype(np.float64) if hashes else np.zeros(self.view.n)
        return self["_match"]


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _per(s: Signals, name: str, limit: str) -> np.ndarray:
    """Terminal ``name`` over the instance's engine ``limit`` (a static fact: max_num_seqs, max_num_batched_tokens)."""
    return s[name] / _f(s.view.facts[limit])


def _prefix_tokens(s: Signals) -> np.ndarray:
    block = s.view.facts.get("block_size")
    if block is None:  # a view without block sizes: the share of the prompt
        return _prefix_share(s) * float(s.req.prompt_tokens)
    return np.minimum(s.match() * block, float(s.req.prompt_tokens))


def _prefix_share(s: Signals) -> np.ndarray:
    n = len(s.req.block_hashes) if s.req.block_hashes else 0
    return s.match() / n if n else np.zeros(s.view.n)


def _ttft_slo(s: Signals) -> float:
    slo = s.req.ttft_slo_ms if s.req.ttft_slo_ms is not None else s.default_slo
    return float(slo) if slo is not None and math.isfinite(slo) else 0.0


_READ: dict[str, Callable[[Signals], object]] = {
    "queue_depth": lambda s: _f(s.view.queue_depth()),
    "running": lambda s: _f(s.view.running()),
    "queued_tokens": lambda s: _f(s.view.queued_tokens()),
    "kv_use": lambda s: _f(s.view.kv_utilization()),
    "queue_frac": lambda s: _per(s, "queue_depth", "max_num_seqs"),
    "running_frac": lambda s: _per(s, "running", "max_num_seqs"),
    "queued_tokens_frac": lambda s: _per(s, "queued_tokens", "max_num_batched_tokens"),
    "outstanding_frac": lambda s: _per(s, "outstanding", "max_num_seqs"),
    "in_transit": lambda s: _f(s.view.in_transit()),
    "outstanding": lambda s: _f(s.view.outstanding()),
    "prefix_tokens": _prefix_tokens,
    "prefix_share": _prefix_share,
    "prompt_tokens": lambda s: float(s.req.prompt_tokens),
    "ttft_slo_ms": _ttft_slo,
    "signal_age_ms": lambda s: float(s.view.signal_age_ms()),
    "has_prefix": lambda s: s.match() > 0,
    "lora_resident": lambda s: s.view.adapter_resident(s.req.adapter),
}


def compile_tree(tree: Node) -> Compiled:
    """The tree as a function of a decision's Signals (values may be scalars: broadcast later)."""
    if tree.name == "const":
        value = np.bool_(tree.value) if isinstance(tree.value, bool) else np.float64(tree.value)
        return lambda s: value
    if not tree.args:
        name = tree.name
        return lambda s: s[name]
    fn = OP[tree.name].fn
    parts = [compile_tree(a) for a in tree.args]
    if len(parts) == 1:
        (a,) = parts
        return lambda s: fn(a(s))
    if len(parts) == 2:
        a, b = parts
        return lambda s: fn(a(s), b(s))
    a, b, c = parts
    return lambda s: fn(a(s), b(s), c(s))


def scores(compiled: Compiled, signals: Signals, n: int) -> np.ndarray:
    """One float per candidate (NaN as -inf)."""
    with np.errstate(all="ignore"):
        out = np.array(np.broadcast_to(np.asarray(compiled(signals), dtype=np.float64), (n,)))
    out[np.isnan(out)] = -np.inf
    return out
