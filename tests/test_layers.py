"""Imports run one way: down the layers below, never up (docs/reading_guide.md, "The layers").

Every module of distsim/ is read with ``ast``; each ``import`` and ``from ... import``, at any depth
(module level, functions, try blocks), is an arrow from the module to the one it names (``from a import b``
names the module a.b when it exists, else a). Imports under ``if TYPE_CHECKING:`` never run and are types
only: they are left out. A module's layer is the one of the longest prefix below that covers it, so a
feature package's schema and registry can sit at the bottom while its engine sits higher up. An arrow into a
higher layer fails, naming the file, the line, the import and both layers. The package's face (distsim itself)
is the one exception: every import runs it first, and what it holds of its own any layer may read.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_imports import PACKAGE, ROOT, _import_nodes, _resolve_from, module_name

# The package itself: every import of a distsim module runs it first, and what it holds of its own (its
# ``__version__``, its ``__file__``) any layer may read; what it imports is checked like any module's.
FACE = "distsim"

# Lowest first. A module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # errors, the plug-in registries' machinery, the small config validators, the request record, file input and
    # output: the ground every layer stands on
    ("base", ("distsim.errors", "distsim.registry", "distsim.validators", "distsim.request", "distsim.inputs",
              "distsim.outputs", "distsim.run_dir", "distsim.report_table", "distsim.metrics.columns",
              "distsim.protocols",  # protocols: what the world, a replica and a signal source offer
              "distsim.provenance", "distsim.typed_merge")),  # the keys the user set; a user's mapping on a typed node
    # the features' config schemas and the registries whose members' parameters become keys; the autoscale node's
    # settings, which every pool's resolution (distsim.cluster.pools) checks
    ("schema", ("distsim.workload.schema", "distsim.runtime.schema", "distsim.autoscale.schema",
                "distsim.autoscale.registry", "distsim.autoscale.settings", "distsim.policies.registry")),
    ("catalog", ("distsim.catalog",)),  # models, GPUs, MIG profiles, capacity arithmetic
    ("events", ("distsim.events",)),  # the clock, the heap, the random streams
    ("instance", ("distsim.instance",)),  # one vLLM engine, its queues and step-time models
    ("signals", ("distsim.signals",)),  # what a router sees: the signal board, its view, the prefix index
    ("policies", ("distsim.policies",)),  # routers, admission, scorers and their settings
    ("workload", ("distsim.workload",)),  # request sources, their SLO defaults
    ("cluster", ("distsim.cluster",)),  # pools of instances behind one router; engine checks, pool resolution
    ("metrics", ("distsim.metrics",)),  # the recorder and every table and figure made from it; fitness, windows
    ("autoscale", ("distsim.autoscale",)),  # scalers reading signals and completions, the controller
    ("cells", ("distsim.cells",)),  # clusters behind a front router
    ("runtime", ("distsim.runtime",)),  # batching runtimes for non-LLM requests, beside the LLM cluster
    # the root schema (every feature's schema and the plug-ins' parameters, for Hydra), composition, the sim
    # section's settings, the runner's and the search's schemas
    ("config", ("distsim.config",)),
    ("resolve", ("distsim.resolve",)),  # the whole config into one frozen Scenario, composing the features' settings
    ("simulate", ("distsim.simulate", "distsim.progress", "distsim.hydra_entry")),  # one run, its progress line
    ("regret", ("distsim.regret",)),  # fork-and-replay regret of a run's decisions; the latency lower bound
    ("runner", ("distsim.runner",)),  # sweeps of runs
    ("search", ("distsim.search",)),  # policy search over sweeps
    ("fidelity", ("distsim.fidelity", "distsim.validate")),  # real runs against simulated ones
    ("commands", (FACE, "distsim.calibrate", "distsim.report", "distsim.__main__")),  # the package face, CLIs
)

# Arrows up that other work removes; each names its owner. The test fails once one is gone (remove it here).
KNOWN_UP: dict[tuple[str, str], str] = {}


def _prefix(module: str) -> str:
    """The longest prefix in LAYERS that covers ``module``."""
    return max((p for _, prefixes in LAYERS for p in prefixes if module == p or module.startswith(p + ".")), key=len)


def layer_of(module: str) -> tuple[int, str]:
    best = _prefix(module)
    return next((i, name) for i, (name, prefixes) in enumerate(LAYERS) if best in prefixes)


def arrows(source: str, name: str, is_package: bool, modules: set[str]) -> list[tuple[str, int, str]]:
    """(imported module, line, the import's first line) for each of ``modules`` that module ``name`` imports."""
    found = []
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _resolve_from(node, name, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        text = (ast.get_source_segment(source, node) or "").splitlines()[0]
        for target in dict.fromkeys(targets):  # ``from a import b, c`` of one module is one arrow
            if target in modules and target not in (name, FACE):
                found.append((target, node.lineno, text))
    return found


def all_arrows() -> list[tuple[Path, str, str, int, str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return [
        (p, module_name(p), t, line, text)
        for p in paths
        for t, line, text in arrows(p.read_text(encoding="utf-8"), module_name(p), p.name == "__init__.py", modules)
    ]


def test_every_package_and_module_is_placed():
    """A new package or top-level module is given its layer here, not left to the package's face."""
    unplaced = sorted(m for m in map(module_name, PACKAGE.rglob("*.py")) if m != FACE and _prefix(m) == FACE)
    assert not unplaced, f"give these a layer in LAYERS: {unplaced}"


def test_imports_run_down_the_layers():
    up = []
    for path, importer, imported, line, text in all_arrows():
        (low, low_name), (high, high_name) = layer_of(importer), layer_of(imported)
        if high > low and (importer, imported) not in KNOWN_UP:
            up.append(f"{path.relative_to(ROOT)}:{line}: `{text}` reaches up from layer {low_name} to {high_name}")
    assert not up, "imports that run up the layers:\n" + "\n".join(up)


def test_known_arrows_up_still_exist():
    seen = {(importer, imported) for _, importer, imported, _, _ in all_arrows()}
    stale = sorted(set(KNOWN_UP) - seen)
    assert not stale, f"these arrows are gone; remove them from KNOWN_UP: {stale}"


def test_the_reader_sees_lazy_imports_and_skips_type_checking():
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from distsim.simulate import run\n"
        "def f():\n    from distsim.runner import plan\n"
    )
    modules = {"distsim.simulate", "distsim.runner", "distsim.runner.plan"}
    assert arrows(source, "distsim.x", False, modules) == [("distsim.runner.plan", 5, "from distsim.runner import plan")]
    assert layer_of("distsim.autoscale.schema")[1] == "schema" and layer_of("distsim.autoscale.controller")[1] == "autoscale"
