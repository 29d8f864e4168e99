"""House rules checked on the source: short functions, and a Cluster that only handles events.

A function longer than 50 lines needs its reason written beside it: a ``# long: ...`` comment in the
comment block right above its ``def`` (or on the ``def`` line), saying why splitting it would not read better.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 50


def _functions(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            above = []  # the comment block right above the def (or its decorators)
            i = first - 2
            while i >= 0 and lines[i].lstrip().startswith("#"):
                above.append(lines[i])
                i -= 1
            reason = any("# long:" in line for line in [*above, lines[node.lineno - 1]])
            yield node, node.end_lineno - node.lineno + 1, reason


def test_every_function_is_short_or_says_why_not():
    long = []
    for path in sorted([*(ROOT / "distsim").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]):
        for node, length, reason in _functions(path):
            if length > MAX_LINES and not reason:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 50 lines without a '# long:' reason:\n" + "\n".join(long)


def test_the_cluster_constructor_only_wires_what_was_built():
    tree = ast.parse((ROOT / "distsim" / "cluster" / "cluster.py").read_text(encoding="utf-8"))
    init = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__"
        and any(isinstance(p, ast.ClassDef) and p.name == "Cluster" and n in p.body for p in ast.walk(tree))
    )
    assert init.end_lineno - init.lineno + 1 <= MAX_LINES
    calls = {c.func.id for c in ast.walk(init) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    assert not calls & {"Instance", "SignalBoard", "ClusterView", "PrefixIndex", "stream"}, calls
