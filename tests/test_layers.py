"""Folders are layers: imports run one way, down the layers below, never up (docs/reading_guide.md, "The layers").

Every module of distsim/ is read with ``ast``; each ``import`` and ``from ... import``, at any depth (module level,
functions, try blocks, and ``if TYPE_CHECKING:`` too: a type named from a higher layer ties the lower one to it as
surely as a call does), is an arrow from the module to the one it names (``from a import b`` names the module a.b
when it exists, else a). A module belongs to its folder: the package right under distsim (distsim.cluster for
distsim.cluster.pools), or the top-level module itself. Each folder has one layer, whatever its modules are, so
the bottom owns the interfaces its upper floors use, and what a lower folder needs of a higher one it declares
itself (distsim.autoscale.host, distsim.instance.engine). An arrow into a higher layer fails, naming the file,
the line, the import and both layers. The package's face (distsim itself) is the one exception: every import
runs it first, and what it holds of its own any layer may read.

Inside a folder, modules may import each other, but not in a circle, except where a registry needs its base
(CIRCLES names each such arrow and why).
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_imports import PACKAGE, ROOT, _is_type_checking, _resolve_from, find_cycle, module_name

# The package itself: every import of a distsim module runs it first, and what it holds of its own (its
# ``__version__``, its ``__file__``) any layer may read.
FACE = "distsim"

# Lowest first: a folder may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # errors, the plug-in registries' machinery, the small config validators, the request record, file input and
    # output, the keys the user set and a typed merge: the ground every layer stands on
    ("base", ("distsim.errors", "distsim.registry", "distsim.validators", "distsim.request", "distsim.inputs",
              "distsim.outputs", "distsim.run_dir", "distsim.report_table", "distsim.provenance",
              "distsim.typed_merge", "distsim.feature",
              "distsim.command")),  # command: every command's outer edge (a failing stdout, Ctrl-C)  # feature: the interface every cluster-level feature implements
    ("catalog", ("distsim.catalog",)),  # models, GPUs, MIG profiles, capacity arithmetic
    ("events", ("distsim.events",)),  # the clock, the heap, the random streams
    ("instance", ("distsim.instance",)),  # one vLLM engine, its parts, queues and step-time models
    ("lora", ("distsim.lora",)),  # LoRA adapters: the engine's slots, their costs, the catalog, the feature
    ("protocols", ("distsim.protocols",)),  # what a world, a replica, a signal source and a record sink offer
    ("signals", ("distsim.signals",)),  # what a router sees: the signal board, its view, the prefix index
    ("policies", ("distsim.policies",)),  # routers, admission, scorers and their settings
    ("workload", ("distsim.workload",)),  # request sources, their SLO defaults
    ("progress", ("distsim.progress",)),  # a run's progress line (it counts the workload's requests)
    # the recorder and the generic tables and figures made from it; fitness, measurement windows
    ("metrics", ("distsim.metrics", "distsim.probe")),  # probe: a run's phase hooks (it names the recorder's types)
    ("autoscale", ("distsim.autoscale",)),  # scalers and the controller, over the pools they declare (host.py)
    ("cluster", ("distsim.cluster",)),  # pools of instances behind one router; engine checks, pool resolution
    # the features whose machinery is the cluster's or the instances': their reports (distsim.feature)
    ("features", ("distsim.hedging", "distsim.mig", "distsim.pd", "distsim.timeline", "distsim.closedloop")),
    ("cells", ("distsim.cells",)),  # clusters behind a front router
    ("runtime", ("distsim.runtime",)),  # batching runtimes for non-LLM requests, beside the LLM cluster
    ("world", ("distsim.world",)),  # the one world builder and the features' registry
    # the root schema (every feature's schema and the plug-ins' parameters, for Hydra), composition, the sim
    # section's settings, the runner's and the search's schemas
    ("config", ("distsim.config",)),
    ("resolve", ("distsim.resolve",)),  # the whole config into one frozen Scenario, composing the features' settings
    ("simulate", ("distsim.simulate", "distsim.hydra_entry")),  # one run; Hydra's steps
    ("regret", ("distsim.regret",)),  # fork-and-replay regret of a run's decisions; the latency lower bound
    ("runner", ("distsim.runner",)),  # sweeps of runs
    ("search", ("distsim.search",)),  # policy search over sweeps
    ("fidelity", ("distsim.fidelity",)),  # real runs against simulated ones
    ("profile", ("distsim.profile",)),  # a GPU's step tables measured, for the step fit
    ("commands", (FACE, "distsim.validate", "distsim.calibrate", "distsim.report", "distsim.__main__")),  # CLIs
)

# The arrows inside a folder that close a circle, each with its reason. Taking them out leaves no circle; the
# test fails once one is gone (remove it here).
REGISTRY_NEEDS_ITS_BASE = "the registry's type names its base class, which registers itself there"
CIRCLES: dict[tuple[str, str], str] = {
    ("distsim.policies.registry", "distsim.policies.base"): REGISTRY_NEEDS_ITS_BASE,
    ("distsim.policies.scorers.registry", "distsim.policies.scorers.base"): REGISTRY_NEEDS_ITS_BASE,
    ("distsim.cells.registry", "distsim.cells.base"): REGISTRY_NEEDS_ITS_BASE,
    ("distsim.workload.length_dists", "distsim.workload.lengths"): REGISTRY_NEEDS_ITS_BASE,
    ("distsim.workload.arrival_processes", "distsim.workload.arrivals"): REGISTRY_NEEDS_ITS_BASE,
    ("distsim.workload.kinds", "distsim.workload.source"): REGISTRY_NEEDS_ITS_BASE,
    # a registry's members or the setting that names one: the registry's type names the base's types
    ("distsim.cells.settings", "distsim.cells.base"): "the front policy's setting holds a FrontRouter class",
    ("distsim.metrics.fitness", "distsim.metrics.settings"): "the FITNESS registry's forms take FitnessSettings",
    # the measurement window (a feature kept in metrics: it redefines how the whole summary is computed)
    ("distsim.metrics.window", "distsim.metrics.tables"): "a feature section of the summary (types only)",
}


def folder(module: str) -> str:
    """The folder (layer unit) of ``module``: the package right under distsim, or the top-level module."""
    return ".".join(module.split(".")[:2])


def layer_of(module: str) -> tuple[int, str]:
    unit = folder(module)
    return next(((i, name) for i, (name, units) in enumerate(LAYERS) if unit in units), (-1, "unplaced"))


def _all_import_nodes(tree: ast.AST):
    """Every Import / ImportFrom in the tree, with whether it stands under ``if TYPE_CHECKING:``."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, types_only = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, types_only
        checking = isinstance(node, ast.If) and _is_type_checking(node)
        for child in ast.iter_child_nodes(node):
            stack.append((child, types_only or (checking and child in node.body)))


def arrows(source: str, name: str, is_package: bool, modules: set[str]) -> list[tuple[str, int, str]]:
    """(imported module, line, the import's first line, marked when types only) for each of ``modules`` that
    module ``name`` imports."""
    found = []
    for node, types_only in _all_import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _resolve_from(node, name, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        text = (ast.get_source_segment(source, node) or "").splitlines()[0] + (" (types only)" if types_only else "")
        for target in dict.fromkeys(targets):  # ``from a import b, c`` of one module is one arrow
            if target in modules and target not in (name, FACE):
                found.append((target, node.lineno, text))
    return sorted(found, key=lambda a: a[1])


def all_arrows() -> list[tuple[Path, str, str, int, str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return [
        (p, module_name(p), t, line, text)
        for p in paths
        for t, line, text in arrows(p.read_text(encoding="utf-8"), module_name(p), p.name == "__init__.py", modules)
    ]


def test_every_folder_is_placed():
    """A new package or top-level module is given its layer here, not left to the package's face."""
    unplaced = sorted({folder(m) for m in map(module_name, PACKAGE.rglob("*.py")) if m != FACE and layer_of(m)[0] < 0})
    assert not unplaced, f"give these a layer in LAYERS: {unplaced}"


def test_imports_run_down_the_layers():
    up = []
    for path, importer, imported, line, text in all_arrows():
        (low, low_name), (high, high_name) = layer_of(importer), layer_of(imported)
        if high > low:
            up.append(f"{path.relative_to(ROOT)}:{line}: `{text}` reaches up from layer {low_name} to {high_name}")
    assert not up, "imports that run up the layers:\n" + "\n".join(up)


def test_no_circle_but_where_a_registry_needs_its_base():
    graph: dict[str, set[str]] = {}
    for _, importer, imported, _, _ in all_arrows():
        if (importer, imported) not in CIRCLES:
            graph.setdefault(importer, set()).add(imported)
            graph.setdefault(imported, set())
    cycle = find_cycle(graph)
    assert cycle is None, "import circle (types included): " + " -> ".join(cycle)


def test_allowed_circles_still_exist():
    seen = {(importer, imported) for _, importer, imported, _, _ in all_arrows()}
    stale = sorted(set(CIRCLES) - seen)
    assert not stale, f"these arrows are gone; remove them from CIRCLES: {stale}"


def test_the_reader_sees_lazy_imports_and_type_checking():
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from distsim.simulate import run\n"
        "def f():\n    from distsim.runner import plan\n"
    )
    modules = {"distsim.simulate", "distsim.runner", "distsim.runner.plan"}
    assert arrows(source, "distsim.x", False, modules) == [
        ("distsim.simulate", 3, "from distsim.simulate import run (types only)"),
        ("distsim.runner.plan", 5, "from distsim.runner import plan"),
    ]
    assert layer_of("distsim.autoscale.schema")[1] == "autoscale" and layer_of("distsim.cluster.pools")[1] == "cluster"
    assert layer_of("distsim.autoscale.schema") < layer_of("distsim.cluster.pools")  # the pools read its settings
