"""What ``python -m distsim`` spends before and after simulating: it skips Hydra's compose that only reads
hydra.mode (null for distsim's tree), and a single run imports no sweep, report or DataFrame library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra._internal.hydra import Hydra
from omegaconf import OmegaConf

from distsim.config.compose import CONF_DIR, mode_is_unset, skip_hydra_mode_compose
from distsim.config.schema import register_schemas

ROOT = Path(__file__).resolve().parents[1]


def test_no_config_file_sets_hydra_mode():
    files = sorted(CONF_DIR.rglob("*.yaml"))
    assert files and not (CONF_DIR / "hydra").exists()
    for path in files:
        node = OmegaConf.load(path)
        assert OmegaConf.select(node, "hydra.mode", default=None) is None, path
        assert "mode" not in (node if "@package hydra" in path.read_text() else {}), path


@pytest.mark.parametrize("overrides", [[], ["policy=weighted", "cluster=pd_disagg"], ["hydra.run.dir=/tmp/x"]])
def test_hydra_own_answer_for_the_mode_is_null(overrides):
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    register_schemas()
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2("distsim", create_config_search_path(str(CONF_DIR)))
        assert hydra.get_mode(config_name="config", overrides=list(overrides)) is None
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize(
    "argv, unset",
    [
        ([], True),
        (["policy=random", "hydra.run.dir=/tmp/x"], True),
        (["-m", "policy=a,b", "seed=range(3)"], True),
        (["hydra.mode=MULTIRUN"], False),
        (["+hydra.mode=RUN"], False),
        (["hydra.searchpath=[file:///tmp/conf]"], False),
        (["hydra/sweeper=basic"], False),
        (["--config-name", "search"], False),
        (["-cd", "/tmp/conf"], False),
    ],
)
def test_the_mode_compose_is_skipped_only_when_the_command_line_leaves_the_mode_alone(monkeypatch, argv, unset):
    original = Hydra.get_mode
    monkeypatch.setattr(Hydra, "get_mode", original)  # restored after the test
    assert mode_is_unset(argv) is unset
    assert skip_hydra_mode_compose(argv) is unset
    assert (Hydra.get_mode is original) is not unset


def _imported(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


HEAVY = {"pandas", "ray", "scipy", "matplotlib", "distsim.runner.sweep", "distsim.report", "importlib.metadata"}


def test_the_cli_module_imports_nothing_a_single_run_does_not_need():
    assert not HEAVY & _imported("import distsim.__main__")


def test_simulating_and_writing_the_files_needs_no_pandas(tmp_path):
    code = f"""
from distsim import load_config, simulate
from distsim.request import Request
result = simulate(load_config(["cluster.instances=2"]), [Request(i, 1000 * i, 100, 20) for i in range(50)])
result.write({str(tmp_path)!r})
assert result.summary["requests"]["completed"] == 50
"""
    assert not HEAVY & _imported(code)
    assert (tmp_path / "requests.parquet").exists() and (tmp_path / "summary.json").exists()


def test_a_command_leaves_its_objects_out_of_the_collection_at_exit():
    """Python's exit ran a full cycle collection over everything the command made (0.08 CPU-s of a
    10-request run); the command freezes its objects first, after its outputs are written."""
    code = """
import atexit, gc
from distsim import command
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
command.run("x", lambda: 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "frozen True"


def test_the_collector_runs_less_often_during_the_events_only(monkeypatch):
    """The cycle collector's young collections every 700 allocations cost 15-20% of a run at 1,000 instances:
    the events run under higher thresholds, and the caller's come back after the run."""
    import gc

    from distsim import load_config, simulate
    from distsim.events.collector import THRESHOLDS
    from distsim.events.loop import EventLoop

    seen = []
    original = EventLoop.run

    def run(self):
        seen.append(gc.get_threshold())
        return original(self)

    monkeypatch.setattr(EventLoop, "run", run)
    before = gc.get_threshold()
    simulate(load_config(["workload.num_requests=5"]))
    assert seen == [THRESHOLDS] and gc.get_threshold() == before
