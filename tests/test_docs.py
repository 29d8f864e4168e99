"""The documentation says what is true: the configuration reference is the schema's (regenerated, not
edited), the tests and files the pages name exist, the README stays a front door, and every page is in
the site's navigation. (`mkdocs build --strict`, run by CI, checks links and anchors.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OWNED_ELSEWHERE = {
    "fidelity.md",
    "changelog.md",
}  # the fidelity report has its own checks; history names old files


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_config_reference_is_the_schemas():
    text, keys = _script("gen_config_reference").generate()
    committed = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    assert committed == text, "docs/reference/config.md is stale: run python scripts/gen_config_reference.py"
    assert keys > 200


def test_every_key_of_the_schema_has_a_description():
    text, _ = _script("gen_config_reference").generate()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    undocumented = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
    assert undocumented == [], "schema keys without a comment: " + ", ".join(undocumented)


def _test_functions() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M):
            found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


def named_tests(text: str) -> list[tuple[str, str | None]]:
    """(test function, the test file the text puts it in, or None) for every test a page names: a name is
    in the file of the parenthesis that follows it (``name`` (tests/x.py) or ``a``, ``b`` (tests/x.py)),
    unless another parenthesis comes first."""
    out, pending = [], []
    for m in re.finditer(r"`(test_\w+)`|\((tests/[\w/]+\.py)|\((?!tests/)", text):
        if m.group(1):
            pending.append(m.group(1))
            continue
        out.extend((name, m.group(2)) for name in pending)
        pending = []
    return out + [(name, None) for name in pending]


def test_the_invariants_name_tests_that_exist():
    text = (DOCS / "invariants.md").read_text(encoding="utf-8")
    functions = _test_functions()
    named = named_tests(text)
    assert len(named) > 100
    wrong = [
        f"{name} ({where or 'any file'})"
        for name, where in named
        if name not in functions or (where is not None and where not in functions[name])
    ]
    assert wrong == []


def test_the_check_finds_a_test_in_the_wrong_file():
    text = "- Tests: `test_a`, `test_b` (tests/x.py); `test_c` (asserts it) (tests/y.py)."
    assert named_tests(text) == [("test_a", "tests/x.py"), ("test_b", "tests/x.py"), ("test_c", None)]


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "data" not in p.relative_to(DOCS).parts)


@pytest.mark.parametrize(
    "page",
    [p for p in _pages() if p.name not in OWNED_ELSEWHERE] + [ROOT / "README.md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_the_files_a_page_names_exist(page):
    text = page.read_text(encoding="utf-8")
    paths = set(
        re.findall(
            r"(?<![\w./-])((?:distsim|tests|scripts|conf|docs|jobs)/[\w./-]*\w\.(?:py|yaml|md|jsonl|json|txt))(?![\w.])",
            text,
        )
    )
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert '    pip install -e ".[test]"' in text and "    python -m distsim " in text and "pytest -q" in text
    commands = re.search(r"## Main commands\n\n((?:    .*\n)+)", text).group(1).splitlines()
    assert len(commands) == 11 and all("#" in line for line in commands)  # eleven commands, one line each
    for link in re.findall(r"\]\(([^)#]+)", text):
        assert link.startswith("http") or (ROOT / link).exists(), link


def test_the_readmes_layout_names_folders_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1]
    top = re.findall(r"^    (\w+)/", layout, re.M)
    assert set(top) >= {"conf", "distsim", "docs", "tests"}
    assert [d for d in top if not (ROOT / d).is_dir()] == []
    packages = re.findall(r"(\w+)/", layout.split("distsim/", 1)[1].split("\n    docs/")[0])
    assert [p for p in packages if not (ROOT / "distsim" / p).is_dir()] == []
    built = {p.name for p in (ROOT / "distsim").iterdir() if (p / "__init__.py").exists()}
    assert built - set(packages) == set(), "packages the layout leaves out"


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return [p for item in node for p in _nav_pages(item)]


def test_every_page_is_in_the_site_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    assert [p for p in nav if not (DOCS / p).is_file()] == []
    pages = {p.relative_to(DOCS).as_posix() for p in _pages()}
    assert pages - set(nav) == set()


def test_the_code_names_modules_that_exist():
    """Docstrings and comments point readers at modules (``distsim/cluster/hedging.py``,
    ``distsim.metrics.window``): each must exist, or the pointer is a small untruth."""
    missing = []
    for path in sorted((ROOT / "distsim").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in set(re.findall(r"(?<![\w./])(distsim/[\w/]+\.py)", text)):
            if not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
        for name in set(re.findall(r"(?<![\w./])(distsim(?:\.[a-z_]\w*)+)", text)):
            parts = name.split(".")
            if not any(
                (ROOT.joinpath(*parts[:i]).with_suffix(".py")).exists()
                or (ROOT.joinpath(*parts[:i]) / "__init__.py").exists()
                for i in range(len(parts), 1, -1)
            ) and parts[1] not in {"__file__", "__version__"}:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []
