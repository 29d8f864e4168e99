"""CI runs the README's set-up commands as written (.ci/run holds them and checks them against the README's
marked block before it runs), and plain ``pytest`` tests this checkout: a newcomer's first commands are the
ones CI proves."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clikit import ROOT

import distsim

CI_RUN = ROOT / ".ci" / "run"


def setup_section_commands() -> list[str]:
    """The indented lines of README.md's "Set up, run, test" section, as a reader sees them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set up, run, test\n", 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_the_setup_block_is_marked_for_ci():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set up, run, test\n", 1)[1].split("\n## ", 1)[0]
    assert "<!-- ci:setup" in section and "<!-- /ci:setup -->" in section


def test_ci_runs_exactly_the_readmes_setup_commands():
    assert "--print" in CI_RUN.read_text(), ".ci/run cannot show what it runs"  # never start a real CI run here
    printed = subprocess.run([str(CI_RUN), "--print"], capture_output=True, text=True, check=True, timeout=300)
    commands = printed.stdout.splitlines()
    assert commands == setup_section_commands()
    words = [c.split("#")[0].split() for c in commands]
    assert ["pip", "install", "-e", '".[test]"'] in words
    assert ["pytest", "-q", "-n", "2"] in words  # plain pytest (not python -m pytest), on two workers


def test_the_tests_import_this_checkouts_code():
    assert Path(distsim.__file__).resolve().is_relative_to(ROOT)
