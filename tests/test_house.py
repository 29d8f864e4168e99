"""House rules checked on the source: short functions, a Cluster that only handles events, and no
patching of live objects.

A function longer than 50 lines needs its reason written beside it: a ``# long: ...`` comment in the
comment block right above its ``def`` (or on the ``def`` line), saying why splitting it would not read better.

Features are chosen when an object is built (a subclass, or a strategy object it holds from birth) and
observers subscribe through the listener lists objects own (docs/reading_guide.md): no module replaces a
method of another object, deletes an attribute, or sets another object's private attributes or ``on_*``
callbacks (see :func:`_patches`).
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


def _modules():
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted((ROOT / "distsim").rglob("*.py"))}


def _method_names(trees) -> set[str]:
    """Names that can only be methods: a ``def`` in some distsim class, and no distsim class keeps data
    under that name (``self.name = ...``, a class-level field or annotation, ``__slots__``)."""
    methods: set[str] = set()
    data: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        data.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        for target in item.targets:
                            if isinstance(target, ast.Name):
                                data.add(target.id)
                                if target.id == "__slots__":
                                    data.update(c.value for c in ast.walk(item.value) if isinstance(c, ast.Constant))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            data.add(t.attr)
    return methods - data


def _made_here(func) -> set[str]:
    """Local names bound to a call's result in ``func`` (objects the function created itself)."""
    made = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            made.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return made


def _outside_imports(tree) -> set[str]:
    """Names bound to modules or objects imported from outside distsim (a library, not a distsim object)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("distsim"))
        elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("distsim") and node.level == 0:
            names.update(a.asname or a.name for a in node.names)
    return names


def _patches(path: Path, tree, methods: set[str]) -> list[str]:
    """The rule, for one module. Any ``del x.y``. Any assignment (``=``, augmented, annotated, or
    ``setattr`` with a constant name) to ``base.name`` where ``base`` is not the bare ``self`` or ``cls``
    and is not a library imported from outside distsim, when ``name`` is a method's (see
    :func:`_method_names`), or when ``name`` is private (``_x``) or a callback (``on_x``) and ``base`` is
    not a local the same function bound to a call's result."""
    outside = _outside_imports(tree)
    found = []
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    scope = {id(node): func for func in funcs for node in ast.walk(func)}  # innermost last: the deepest wins
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Delete):
            found += [f"{where} del {ast.unparse(t)}" for t in node.targets if isinstance(t, ast.Attribute)]
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.func.id == "delattr":
                found.append(f"{where} {ast.unparse(node)}")
                continue
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            targets = [(node.args[0], name.value)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            flat = [t for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            targets = [(t.value, t.attr) for t in flat if isinstance(t, ast.Attribute)]
        else:
            continue
        for base, attr in targets:
            if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in outside):
                continue
            func = scope.get(id(node))
            made = isinstance(base, ast.Name) and func is not None and base.id in _made_here(func)
            if attr in methods:
                found.append(f"{where} sets method {ast.unparse(base)}.{attr}")
            elif (attr.startswith("_") and not attr.startswith("__") or attr.startswith("on_")) and not made:
                found.append(f"{where} sets {ast.unparse(base)}.{attr} on an object it did not create")
    return found


def test_no_module_patches_a_live_object():
    trees = _modules()
    methods = _method_names(trees.values())
    found = [line for path, tree in trees.items() for line in _patches(path, tree, methods)]
    assert not found, "patches of live objects (choose the behaviour at build time, or subscribe):\n" + "\n".join(found)


def test_the_patch_rule_finds_patches(tmp_path):
    source = """
class Engine:
    def step(self): ...
    def _admit(self): ...

def install(engine, other):
    engine.step = other.step
    engine._admit = other.step
    engine.on_done = print
    del engine.step
    setattr(engine, "step", print)
    made = Engine()
    made._admit = print
    made.on_done = print
    engine.count = 1
"""
    path = ROOT / "distsim" / "_probe.py"
    tree = ast.parse(source)
    found = _patches(path, tree, _method_names([tree]))
    assert sorted(line.split(" ", 1)[1] for line in found) == [
        "del engine.step", "sets engine.on_done on an object it did not create", "sets method engine._admit",
        "sets method engine.step", "sets method engine.step", "sets method made._admit",
    ]
