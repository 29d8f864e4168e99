"""INV-9 (docs/invariants.md): no admission or routing policy reads a request's true output length.

A real router cannot know how many tokens a request will generate; a policy that read
``Request.output_tokens`` would make the simulated policy look better than any deployable one. Policies
receive the request itself (for its prompt, prefix hashes, tenant, SLOs), so this is checked on their
source: no attribute, ``getattr`` name or string in distsim/policies, nor in the cell layer's front routers
(distsim/cells/front), names the output length.

The one exception is the oracle (distsim/policies/oracle.py), a clairvoyant reference router that exists to
show how far deployable policies are from one that knows: it declares itself ``clairvoyant``, and it alone
may read output lengths and the engines themselves (``ClusterView.clairvoyant_engines``).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

POLICIES = Path(__file__).resolve().parents[1] / "distsim" / "policies"
FRONTS = Path(__file__).resolve().parents[1] / "distsim" / "cells" / "front"
FORBIDDEN = {"output_tokens", "clairvoyant_engines"}
CLAIRVOYANT = {"oracle.py"}  # the reference router, not a deployable policy (see above)


def _mentions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FORBIDDEN:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
    return found


def test_no_policy_reads_the_output_length():
    files = sorted(p for p in POLICIES.rglob("*.py") if p.name not in CLAIRVOYANT)
    assert len(files) > 10  # the policies and scorers are where this test looks
    files += sorted(FRONTS.rglob("*.py"))
    found = [hit for path in files for hit in _mentions(path)]
    assert not found, f"policies read the true output length: {found}"


def test_the_clairvoyant_oracle_says_it_is_one():
    from distsim.policies.base import ROUTERS

    for name in ROUTERS.names():
        cls = ROUTERS.get(name)
        reads = any(_mentions(Path(inspect.getfile(cls))))
        assert getattr(cls, "clairvoyant", False) == (name == "oracle"), name
        assert not reads or name == "oracle", name
