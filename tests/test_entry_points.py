"""Every ``python -m`` entry point of distsim runs its main through the one command wrapper
(distsim.command.run), so a project error is one line and exit 2 everywhere: each is found by walking
distsim/ (a new one that is not listed here fails the first test), and each is run with a bad output, an
existing file and a read-only folder. We run as root, so the read-only folder is os.access refusing it
(tests/test_bad_inputs_outputs.py's read_only), in the command's own process."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from clikit import ROOT, assert_user_error, patched
from test_bad_inputs_outputs import FIDELITY_RUN, SMALL, read_only

from distsim.runner import store
from distsim.runner.ranking import rank_configs

PACKAGE = ROOT / "distsim"
STEPS = str(ROOT / "tests" / "fixtures" / "fidelity_steps")
HELPERS = {"distsim.runner.guard"}  # run as a script (python -I guard.py) by local_ray, never by a user
MAIN_BLOCK = re.compile(r'^if __name__ == "__main__":', re.M)


def entry_points() -> set[str]:
    """Modules ``python -m`` runs: packages with a __main__.py, and modules with a __main__ block."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if path.name == "__main__.py":
            found.add(name.removesuffix(".__main__"))
        elif MAIN_BLOCK.search(path.read_text(encoding="utf-8")):
            found.add(name)
    return found - HELPERS


def _main_source(module: str) -> str:
    path = ROOT / Path(*module.split("."))
    text = (path / "__main__.py").read_text() if path.is_dir() else path.with_suffix(".py").read_text()
    match = MAIN_BLOCK.search(text)
    return text[match.start() :] if match else text


# entry point (and stage) -> its arguments with OUT standing for the bad output
BAD_OUT = {
    "distsim": [*SMALL, "hydra.run.dir=OUT"],
    "distsim.search": ["hydra.run.dir=OUT"],
    "distsim.search.scenarios": ["--out", "OUT"],
    "distsim.search.export": ["--from", "OUT"],  # a folder with no search in it
    "distsim.search.scenarios --calibrate": ["--calibrate", "--train", "1", "--holdout", "0", "--out", "OUT"],
    "distsim.validate": [FIDELITY_RUN, "--out", "OUT"],
    "distsim.report": ["SWEEP", "--out", "OUT"],
    "distsim.calibrate steps": ["steps", STEPS, "--out", "OUT"],
    "distsim.calibrate runs": ["runs", FIDELITY_RUN, "--iterations", "1", "--workers", "1", "--out", "OUT/fit.json"],
    "distsim.calibrate validate": ["validate", FIDELITY_RUN, "--out", "OUT"],
    "distsim.calibrate report": ["report", "FIT", "--out", "OUT/fit.md"],
    "distsim.profile": ["--model", str(ROOT / "tests" / "fixtures" / "profile" / "tiny-llama.json"), "--backend", "numpy", "--grid", "tiny", "--out", "OUT"],
    "distsim.workload.traces.reuse": None,  # prints two figures, writes no file
    "distsim.workload.traces.otel": [str(ROOT / "tests" / "fixtures" / "traces" / "otel_genai_agent.jsonl"), "OUT/sessions.csv"],
}


def test_every_entry_point_is_known_and_runs_through_the_command_wrapper():
    assert entry_points() == {name.split()[0] for name in BAD_OUT}
    for module in entry_points():
        assert "command.run(" in _main_source(module), f"{module}: its main does not run through distsim.command.run"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A sweep directory's tables (results.parquet, ranking.csv): what distsim.report reads first."""
    out = tmp_path_factory.mktemp("sweep")
    results = pd.DataFrame({"job": [0, 1], "overrides": ["seed=0", "seed=1"], "config": ["", ""], "policy": ["random"] * 2,
                            "seed": [0, 1], "status": ["ok"] * 2, "error": [None] * 2, "fitness": [1.0, 1.1]})  # fmt: skip
    results.to_parquet(out / store.RESULTS_FILE)
    rank_configs(results).to_csv(out / store.RANKING_FILE, index=False)
    return out


@pytest.fixture(scope="module")
def fit_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fit") / "fit.json"
    part = '{"values": {}, "runs": {}, "medians": {}}'
    path.write_text(f'{{"command": "c", "start": {part}, "fit": {part}, "data": []}}')
    return path


@pytest.mark.parametrize("case", ["file", "read_only"])
@pytest.mark.parametrize("entry", [name for name, args in BAD_OUT.items() if args is not None])
def test_a_bad_out_is_one_line_and_exit_2_from_every_entry_point(entry, case, tmp_path, sweep_dir, fit_file):
    """Before: ``python -m distsim.search.scenarios --out FILE`` a 15-line traceback, exit 1."""
    module = entry.split()[0]
    patch = ""
    if case == "file":
        out = tmp_path / "taken"
        out.write_text("not a folder")
    else:
        out = tmp_path / "ro"
        out.mkdir()
        patch = read_only(out)
    swap = {"SWEEP": str(sweep_dir), "FIT": str(fit_file)}
    args = [swap.get(a, a.replace("OUT", str(out))) for a in BAD_OUT[entry]]
    proc = subprocess.run(patched(patch, module, *args), cwd=ROOT, capture_output=True, text=True, timeout=600)
    line = assert_user_error(proc, 2, str(out))
    assert line.startswith(f"{module}: ") or line.startswith("distsim"), line
    if case == "read_only":
        assert [p.name for p in out.iterdir()] == [], "nothing written into the read-only folder"
