"""Declared contracts, not friend access: no module uses another's private names.

Each module of distsim/ is read with ``ast``. A private name is one with a leading underscore (not a dunder).
It fails:

- ``from a.b import _name`` of a distsim module (the name belongs to a.b: make it public, with a docstring);
- ``obj._attr`` where ``obj`` is not ``self`` or ``cls`` and this module defines no private ``_attr`` of its
  own (a method, an attribute it sets, a slot): another module's object, reached into.

A library's private names (``from lib._internal import x``, ``lib_object._attr``: a name no distsim module
defines) are listed apart in LIBRARY, each with its reason; a new one fails too. (A name is told apart by its
spelling: a library's that a distsim module also defines, OmegaConf's ``_metadata``, is listed in LIBRARY.)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "distsim"

# (file, private name) of a distsim module used by another, each with its reason. The test fails once one is
# gone (remove it here).
KNOWN: dict[tuple[str, str], str] = {}

OMEGACONF_NODES = "OmegaConf gives no public way to walk a node's children with their flags and metadata"
# (file, private name) of a library used by distsim, each with its reason
LIBRARY: dict[tuple[str, str], str] = {
    ("distsim/runner/session.py", "_exit"): "os._exit: a stopped search leaves at once, past Ray's exit handlers",
    ("distsim/hydra_entry.py", "hydra._internal"): "one function replaces Hydra internals (hydra_entry.SEAMS)",
    ("distsim/config/compose.py", "hydra._internal"): "Hydra's own command-line parser; Hydra.get_mode (SEAMS)",
    ("distsim/run_dir.py", "hydra._internal"): "Hydra's own command-line parser: the run directory it will make",
    ("distsim/runner/local_ray.py", "ray._private"): "Ray's single-machine switch, for a ray imported earlier",
    ("distsim/runner/local_ray.py", "ray._raylet"): "Ray re-reads its token settings (as ray.init does)",
    ("distsim/runner/startup.py", "ray._private"): "Ray's fixed 30 s raylet registration wait and GCS port wait, bounded by runner.start_timeout_s",
    ("distsim/runner/faults.py", "_exit"): "os._exit is public: a worker dies as a crashed one would",
    ("distsim/regret/fork.py", "_exit"): "os._exit is public: a forked child leaves without the parent's atexit",
    **{("distsim/provenance.py", n): OMEGACONF_NODES for n in ("_set_flag", "_get_node_flag", "_get_node", "_is_none",
                                                                "_is_missing")},
    **{("distsim/config/known_keys.py", n): OMEGACONF_NODES for n in ("_metadata", "_is_none", "_is_missing",
                                                                       "_is_interpolation", "_get_node", "_iter_ex")},
    **{("distsim/typed_merge.py", n): OMEGACONF_NODES for n in ("_get_full_key", "_get_node")},
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_here(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, names and attributes it binds, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # __slots__ entries
    return {n for n in names if _private(n)}


def _libraries(tree: ast.AST) -> set[str]:
    """Names bound to what the module imports from outside distsim."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("distsim"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("distsim"):
            names.update(a.asname or a.name for a in node.names)
    return names


def private_uses(source: str, path: str, package_names: set[str]) -> tuple[list, list]:
    """(distsim's, a library's): (file, private name, line) for each private name of another module used."""
    tree = ast.parse(source)
    own, libraries = _defined_here(tree), _libraries(tree)
    ours, theirs = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.startswith("distsim"):
                ours += [(path, a.name, node.lineno) for a in node.names if _private(a.name)]
            else:
                hidden = next((".".join(module.split(".")[: i + 1]) for i, p in enumerate(module.split("."))
                               if _private(p)), None)
                theirs += [(path, hidden, node.lineno)] if hidden else []
                theirs += [(path, a.name, node.lineno) for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in package_names and not (isinstance(root, ast.Name) and root.id in libraries):
                ours.append((path, node.attr, node.lineno))
            else:
                theirs.append((path, node.attr, node.lineno))
    return ours, theirs


def _scan() -> tuple[list, list]:
    trees = {p: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}
    package_names = set().union(*(_defined_here(ast.parse(s)) for s in trees.values()))
    ours, theirs = [], []
    for path, source in trees.items():
        o, t = private_uses(source, str(path.relative_to(ROOT)), package_names)
        ours += o
        theirs += t
    return ours, theirs


def test_no_module_uses_another_modules_private_names():
    ours, _ = _scan()
    found = [f"{path}:{line}: {name}" for path, name, line in ours if (path, name) not in {*KNOWN, *LIBRARY}]
    assert not found, "private names used across modules (make them public, or declare an interface):\n" + "\n".join(found)


def test_library_private_names_are_named_with_their_reason():
    _, theirs = _scan()
    found = sorted({f"{path}:{line}: {name}" for path, name, line in theirs if (path, name) not in LIBRARY})
    assert not found, "a library's private names (use its public API, or name the reason in LIBRARY):\n" + "\n".join(found)


def test_the_exceptions_are_still_needed():
    ours, theirs = _scan()
    seen = {(path, name) for path, name, _ in ours + theirs}
    stale = sorted((set(KNOWN) | set(LIBRARY)) - seen)
    assert not stale, f"these uses are gone; remove them from KNOWN or LIBRARY: {stale}"


def test_the_scan_finds_friend_access():
    source = """
from distsim.instance.kv_cache import _matched
from hydra._internal.utils import get_args_parser
import numpy as np

class Part:
    def __init__(self, inst):
        self._inst = inst

    def go(self, other):
        self._inst.wake(0)
        other._wake(0)
        self._inst._publish()
        np._private_thing()
        return other._inst
"""
    ours, theirs = private_uses(source, "distsim/x.py", {"_matched", "_wake", "_publish", "_inst"})
    assert sorted((n, line) for _, n, line in ours) == [("_matched", 2), ("_publish", 13), ("_wake", 12)]
    assert sorted(n for _, n, _ in theirs) == ["_private_thing", "hydra._internal"]
