"""An expression as a readable Python module: a score function in plain numpy over named signals, and a
router class that uses it (the policy search writes one beside the evolved policy's YAML).

The module is for reading and reuse: the YAML names the same expression for the ``expression`` router,
which is what ``python -m distsim ... policy=<name>`` runs. tests/test_expression_policy.py checks that a
written module scores every candidate exactly as the expression router does.
"""

from __future__ import annotations

import textwrap

from distsim.policies.expression.grammar import TERMINAL
from distsim.policies.expression.tree import Node, emit, emit_numpy

_SOURCE_WORDS = {
    "signal": "instance-reported, as stale as the signals config makes it",
    "router": "the router's own count, always current",
    "prefix": "the router's prefix index, for this request",
    "request": "this request",
    "adapters": "the engines' LoRA slots, as the router's directory holds them",
}

_HELPERS = '''
def protected_div(a, b):
    """a / b, and 1 where b is 0."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return np.divide(a, b, out=np.ones(a.shape), where=b != 0)


def above_min(x):
    """How far above the least value over the candidates."""
    x = np.asarray(x, dtype=np.float64)
    return x - x.min()


def scale(x):
    """Min-max to [0, 1] over the candidates (0 everywhere when all are equal)."""
    x = np.asarray(x, dtype=np.float64)
    lo, span = x.min(), x.max() - x.min()
    return (x - lo) / span if span > 0 else np.zeros(x.shape)
'''

_ROUTER = '''

class {cls}(Router):
    """Routes to the candidate with the highest score(...); ties from the router's own stream."""

    reads_signals = {reads_signals}
    uses_prefix_index = {uses_prefix}

    def route(self, req, view) -> int:
        signals = Signals(req, view, self.ctx.extra.get("default_ttft_slo_ms"))
        with np.errstate(all="ignore"):
            total = np.array(np.broadcast_to(np.asarray(score({call}), dtype=np.float64), (view.n,)))
        total[np.isnan(total)] = -np.inf
        self.last_scores = total
        return pick_max(total, self.ctx.rng)
'''


def module_source(tree: Node, name: str, header: str = "") -> str:
    """The module's text; ``header`` (comment lines) goes on top, e.g. how the policy was found."""
    used = sorted(tree.terminals(), key=list(TERMINAL).index)
    args = ", ".join(used) or "*_"
    comments = "".join(
        f"    # {t}: {TERMINAL[t].doc} ({_SOURCE_WORDS[TERMINAL[t].source]})\n" for t in used
    )
    body = textwrap.fill(emit_numpy(tree), 100, subsequent_indent=" " * 8, break_long_words=False, break_on_hyphens=False)
    readable = textwrap.fill(emit(tree), 96, initial_indent="    ", subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    cls = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Router"
    sources = {TERMINAL[t].source for t in used}
    text = (
        f"{header}"
        f'"""The routing policy {name!r}: each candidate instance scores\n\n{readable}\n\n'
        "and the highest score wins. The same expression is policy.routing.expression in its YAML.\n\"\"\"\n\n"
        "import numpy as np\n\n"
        "from distsim.policies.base import Router\n"
        "from distsim.policies.choice import pick_max\n"
        "from distsim.policies.expression.evaluate import Signals\n\n"
        f"EXPRESSION = {emit(tree)!r}\n\n"
        f"{_HELPERS}\n\n"
        f"def score({args}):\n"
        '    """The score per candidate (arrays over the candidates; request values are scalars)."""\n'
        f"{comments}"
        f"    return (\n        {body}\n    )\n"
        + _ROUTER.format(
            cls=cls,
            reads_signals="signal" in sources,
            uses_prefix="prefix" in sources,
            call=", ".join(f"signals[{t!r}]" for t in used),
        )
    )
    return text
