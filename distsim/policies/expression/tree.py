"""Expression trees: parsed from their readable form, type-checked, printed back.

The readable form is a Python expression restricted to the grammar (distsim.policies.expression.grammar):
names of terminals, numbers, ``True``/``False``, ``+ - * /``, unary ``-``, ``<``, ``>``, ``and``, ``or``,
``not``, ``a if cond else b`` and the calls ``min``, ``max``, ``above_min``, ``scale``. It is read with
:mod:`ast` and never evaluated by Python: anything outside the grammar is refused with a message saying
what and where. :func:`emit` prints a tree so that ``parse(emit(t)) == t``.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from distsim.policies.expression.grammar import OP, TERMINAL, TYPE_NAME, Bool, Num

MAX_CHARS = 20_000  # a longer text is refused before parsing
# The deepest tree (height, DEAP's measure) any expression may have. Everything after parsing recurses once
# per level or more: evaluating a tree and printing it take 2 Python frames per level (they break near 500
# levels from a bare stack, Python's limit being 1,000 frames), its height 3, comparing two trees 4 (near
# 250), and printed as numpy code every level may open a parenthesis, of which Python reads at most 200
# nested. 100 keeps every one of them at least twice clear, with room for the caller's own stack.
MAX_DEPTH = 100


class ExpressionError(ValueError):
    """The text is not an expression of the grammar (the message says why)."""


@dataclass(frozen=True)
class Node:
    """An operator with its arguments, a terminal (``name`` only), or a constant (``name`` "const")."""

    name: str
    args: tuple[Node, ...] = ()
    value: float | bool | None = None

    @property
    def type(self) -> type:
        if self.name == "const":
            return Bool if isinstance(self.value, bool) else Num
        if self.name in TERMINAL:
            return TERMINAL[self.name].type
        return OP[self.name].ret

    def walk(self):
        yield self
        for a in self.args:
            yield from a.walk()

    @property
    def size(self) -> int:
        return sum(1 for _ in self.walk())

    @property
    def height(self) -> int:
        """Edges on the longest path to a leaf (DEAP's height: a single terminal is 0)."""
        return 1 + max(a.height for a in self.args) if self.args else 0

    def terminals(self) -> set[str]:
        return {n.name for n in self.walk() if n.name in TERMINAL}


def const(value: float | bool) -> Node:
    return Node("const", (), value if isinstance(value, bool) else float(value))


_BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_CMP = {ast.Lt: "lt", ast.Gt: "gt"}
_BOOL = {ast.And: "and", ast.Or: "or"}
_CALLS = {"min", "max", "above_min", "scale"}


def parse(text: str) -> Node:
    """The tree of ``text``, type-checked, of type Num (a score). Raises ExpressionError."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("is empty: write a score such as -(queue_depth + running + in_transit)")
    if len(text) > MAX_CHARS:
        raise ExpressionError(f"is {len(text)} characters long (at most {MAX_CHARS})")
    try:
        body = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ExpressionError(f"is not an expression ({err.msg})") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError(f"is nested too deeply to read (at most {MAX_DEPTH} levels)") from None
    depth = _depth(body)
    if depth > MAX_DEPTH:
        raise ExpressionError(f"is nested {depth} levels deep (at most {MAX_DEPTH}): write it shorter")
    tree = _node(body, text)  # recurses once per level: safe now
    check_types(tree, Num, text)
    return tree


def _depth(body: ast.expr) -> int:
    """The height of the tree ``body`` will become, counted without recursion (a chain of 500 ``+`` is an
    ast 500 deep): ``a and b and c`` is one ast node but a chain of two ``and`` nodes (see _node)."""
    deepest, todo = 0, [(body, 0)]
    while todo:
        e, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(e, ast.BoolOp):
            last = len(e.values) - 1
            todo += [(v, depth + last - max(i - 1, 0)) for i, v in enumerate(e.values)]
        else:
            todo += [(c, depth + 1) for c in ast.iter_child_nodes(e) if isinstance(c, ast.expr)]
    return deepest


def _where(part: ast.AST, text: str) -> str:
    return repr(ast.get_source_segment(text.strip(), part) or ast.dump(part))


def _node(e: ast.AST, text: str) -> Node:  # long: one case per construct of the grammar
    if isinstance(e, ast.Name):
        if e.id in TERMINAL:
            return Node(e.id)
        raise ExpressionError(f"unknown name {e.id!r}; known: {', '.join(TERMINAL)}")
    if isinstance(e, ast.Constant):
        v = e.value
        if isinstance(v, bool):
            return const(v)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return const(float(v))
        raise ExpressionError(f"{_where(e, text)} is not a finite number or True/False")
    if isinstance(e, ast.BinOp) and type(e.op) in _BIN:
        return Node(_BIN[type(e.op)], (_node(e.left, text), _node(e.right, text)))
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return Node("neg", (_node(e.operand, text),))
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return Node("not", (_node(e.operand, text),))
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _CMP:
        return Node(_CMP[type(e.ops[0])], (_node(e.left, text), _node(e.comparators[0], text)))
    if isinstance(e, ast.BoolOp):
        nodes = [_node(v, text) for v in e.values]
        out = nodes[0]
        for n in nodes[1:]:
            out = Node(_BOOL[type(e.op)], (out, n))
        return out
    if isinstance(e, ast.IfExp):
        return Node("if", (_node(e.test, text), _node(e.body, text), _node(e.orelse, text)))
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _CALLS and not e.keywords:
        want = len(OP[e.func.id].args)
        if len(e.args) != want:
            raise ExpressionError(f"{e.func.id}() takes {want} argument(s) (got {len(e.args)}) in {_where(e, text)}")
        return Node(e.func.id, tuple(_node(a, text) for a in e.args))
    allowed = "numbers, signal names, + - * /, < >, and/or/not, x if c else y, min/max/above_min/scale"
    raise ExpressionError(f"{_where(e, text)} is outside the grammar ({allowed})")


def check_types(tree: Node, want: type, text: str = "") -> None:
    """Every operator gets arguments of its types and ``tree`` is of type ``want``."""
    if tree.type is not want:
        raise ExpressionError(f"{emit(tree)!r} is {TYPE_NAME[tree.type]} where {TYPE_NAME[want]} is needed")
    if tree.args:
        for arg, t in zip(tree.args, OP[tree.name].args):
            check_types(arg, t, text)


def _literal(value: float | bool) -> str:
    if isinstance(value, bool):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def emit(tree: Node) -> str:
    """The readable form: parentheses only where Python's precedence needs them to keep the tree."""
    return _emit(tree, code=False)[0]


def emit_numpy(tree: Node) -> str:
    """The same as plain numpy code over arrays named as the terminals (and the grammar's helpers
    ``protected_div``, ``above_min``, ``scale``)."""
    return _emit(tree, code=True)[0]


def _emit(tree: Node, code: bool) -> tuple[str, int]:
    if tree.name == "const":
        if code and isinstance(tree.value, bool):
            return f"np.{tree.value}_", 9
        text = _literal(tree.value)
        return (text, 9) if not text.startswith("-") else (f"({text})", 9)
    if tree.name in TERMINAL:
        return tree.name, 9
    op = OP[tree.name]
    form = op.code if code else op.form
    prec = 9 if form.endswith(")") and not form.startswith("{") else op.prec
    parts = [_emit(a, code) for a in tree.args]
    if prec == 9:  # a call: arguments need nothing
        return form.format(*(p[0] for p in parts)), 9
    shown = []
    for i, (text, p) in enumerate(parts):
        # the first operand of a left-associative operator may bind as loosely as the operator itself;
        # later operands (and every operand of if/else and unary ops) must bind tighter
        ok = p >= prec if i == 0 and len(parts) == 2 else p > prec
        if op.name == "neg" and p == 8:
            ok = True  # --x reads back as neg(neg(x))
        shown.append(text if ok else f"({text})")
    return form.format(*shown), prec
