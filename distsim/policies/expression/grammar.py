"""The expression language's grammar: one table of typed terminals and one of typed operators.

Engine-normalised terminals (``*_frac``, ``kv_use``, ``prefix_share``) divide a count by the instance's own
limit (max_num_seqs, max_num_batched_tokens, its KV blocks, the prompt's blocks), so an expression learned on
engines of 16 sequences reads the same on engines of 256: ``queue_frac > 0.5`` is "half a batch waiting"
on both, where ``queue_depth > 8`` is a different threshold on each.

Two types: ``Num`` (a float per candidate instance, or one float broadcast to all) and ``Bool`` (a
condition per instance). An expression of type ``Num`` scores every candidate; the router takes the
highest. Everything that reads, evaluates, prints, writes as numpy code or evolves expressions
(distsim.search.gp builds DEAP's typed primitive set from these tables) goes by these two tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class Num:
    """Type tag: a number per instance."""


class Bool:
    """Type tag: a condition per instance."""


@dataclass(frozen=True)
class TerminalSpec:
    name: str
    type: type
    source: str  # "signal" (instance-reported, maybe stale), "router" (always current), "prefix", "request", "adapters"
    doc: str
    evolved: bool = True  # in the policy search's primitive set (False: parsed and evaluated, never drawn by evolution)


@dataclass(frozen=True)
class OpSpec:
    name: str
    args: tuple[type, ...]
    ret: type
    fn: Callable[..., np.ndarray]
    form: str  # the readable form, "{0} + {1}", "min({0}, {1})"
    prec: int  # Python's binding strength of the form (higher binds tighter; 9: a call or an atom)
    code: str  # the same as plain numpy code over named arrays
    doc: str


TERMINALS: tuple[TerminalSpec, ...] = (
    TerminalSpec("queue_depth", Num, "signal", "requests waiting in the instance's queue"),
    TerminalSpec("running", Num, "signal", "requests in the instance's running batch"),
    TerminalSpec("queued_tokens", Num, "signal", "prompt tokens waiting in the instance's queue"),
    TerminalSpec("kv_use", Num, "signal", "share of the instance's KV blocks in use (0..1)"),
    TerminalSpec("queue_frac", Num, "signal", "requests waiting over the instance's max_num_seqs (batches queued)"),
    TerminalSpec("running_frac", Num, "signal", "requests running over the instance's max_num_seqs (0..1)"),
    TerminalSpec("queued_tokens_frac", Num, "signal",
                 "prompt tokens waiting over the instance's max_num_batched_tokens (token budgets queued)"),
    TerminalSpec("in_transit", Num, "router", "requests routed to the instance, not yet in its queue"),
    TerminalSpec("outstanding", Num, "router", "requests routed to the instance, not yet finished"),
    TerminalSpec("outstanding_frac", Num, "router", "requests routed there, not yet finished, over its max_num_seqs"),
    TerminalSpec("prefix_tokens", Num, "prefix", "prompt tokens of this request in blocks the instance holds"),
    TerminalSpec("prefix_share", Num, "prefix", "share of this request's prompt blocks the instance holds (0..1)"),
    TerminalSpec("prompt_tokens", Num, "request", "this request's prompt length"),
    TerminalSpec("ttft_slo_ms", Num, "request", "this request's TTFT SLO (its class's, else the workload's; 0: none)"),
    TerminalSpec("signal_age_ms", Num, "signal", "age of the oldest instance-reported signal (0 when live)"),
    TerminalSpec("has_prefix", Bool, "prefix", "the instance holds at least one block of this request's prompt"),
    # left out of evolution: the search's primitive set, and so its draws for an existing seed, stay as they were
    TerminalSpec("lora_resident", Num, "adapters",
                 "1 where the instance's GPU slots hold this request's LoRA adapter, else 0 (0 for the base model)", False),
)
TERMINAL = {t.name: t for t in TERMINALS}

# the constants evolution draws from (a parsed expression may hold any finite number)
CONSTANTS: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 2048.0)


def _div(a, b):
    """Protected division: 1 where the divisor is 0."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return np.divide(a, b, out=np.ones(a.shape), where=b != 0)


def _above_min(x):
    x = np.asarray(x, dtype=np.float64)
    return x - x.min()


def _scale(x):
    """Min-max to [0, 1] across the candidates; 0 everywhere when all are equal."""
    x = np.asarray(x, dtype=np.float64)
    lo = x.min()
    span = x.max() - lo
    return (x - lo) / span if span > 0 else np.zeros(x.shape)


N, B = Num, Bool
OPS: tuple[OpSpec, ...] = (
    OpSpec("add", (N, N), N, np.add, "{0} + {1}", 6, "{0} + {1}", "sum"),
    OpSpec("sub", (N, N), N, np.subtract, "{0} - {1}", 6, "{0} - {1}", "difference"),
    OpSpec("mul", (N, N), N, np.multiply, "{0} * {1}", 7, "{0} * {1}", "product"),
    OpSpec("div", (N, N), N, _div, "{0} / {1}", 7, "protected_div({0}, {1})", "quotient, 1 where the divisor is 0"),
    OpSpec("neg", (N,), N, np.negative, "-{0}", 8, "-{0}", "negation"),
    OpSpec("min", (N, N), N, np.minimum, "min({0}, {1})", 9, "np.minimum({0}, {1})", "smaller, per instance"),
    OpSpec("max", (N, N), N, np.maximum, "max({0}, {1})", 9, "np.maximum({0}, {1})", "larger, per instance"),
    OpSpec("above_min", (N,), N, _above_min, "above_min({0})", 9, "above_min({0})", "x minus its least value over the candidates"),
    OpSpec("scale", (N,), N, _scale, "scale({0})", 9, "scale({0})", "min-max to [0, 1] over the candidates (0 when all equal)"),
    OpSpec("lt", (N, N), B, np.less, "{0} < {1}", 5, "{0} < {1}", "less than"),
    OpSpec("gt", (N, N), B, np.greater, "{0} > {1}", 5, "{0} > {1}", "greater than"),
    OpSpec("not", (B,), B, np.logical_not, "not {0}", 4, "np.logical_not({0})", "negation"),
    OpSpec("and", (B, B), B, np.logical_and, "{0} and {1}", 3, "np.logical_and({0}, {1})", "both"),
    OpSpec("or", (B, B), B, np.logical_or, "{0} or {1}", 2, "np.logical_or({0}, {1})", "either"),
    OpSpec("if", (B, N, N), N, np.where, "{1} if {0} else {2}", 1, "np.where({0}, {1}, {2})", "choice per instance"),
)
OP = {o.name: o for o in OPS}
TYPE_NAME = {Num: "a number", Bool: "a condition"}
