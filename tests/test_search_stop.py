"""Ctrl-C stops a search at once: the Ray session is abandoned (its guard told to kill the session's
processes, in-flight jobs with them), never shut down gracefully or waited for, the process exits 130, and
the best candidate so far is on disk. Counted, never timed."""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from searchkit import fake_evaluate

from distsim.runner import local_ray


class Pipe:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


class Guard:
    """A local Ray's guard process, counting what is asked of it."""

    def __init__(self):
        self.stdin, self.waits, self.kills = Pipe(), 0, 0

    def wait(self, timeout=None):
        self.waits += 1

    def kill(self):
        self.kills += 1


def test_abandoning_a_local_ray_tells_its_guard_and_waits_for_nothing(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "set by the session")
    guard = Guard()
    local = local_ray.LocalRay(guard, {"RAY_ADDRESS": None})
    local.abandon()
    assert guard.stdin.closed == 1 and guard.waits == 0 and guard.kills == 0
    assert local.guard is None
    assert "RAY_ADDRESS" not in os.environ  # the environment the start set is restored


class Session:
    def __init__(self):
        self.calls: list[str] = []

    def abandon(self):
        self.calls.append("abandon")

    def shutdown(self):
        self.calls.append("shutdown")


def test_ctrl_c_abandons_ray_exits_130_at_once_and_leaves_the_best_so_far(tmp_path, monkeypatch, capsys):
    """Stopped in generation 2 (the evaluator raises KeyboardInterrupt, as a SIGINT in the sweep does): the
    session is abandoned once and never shut down, the exit skips the exit handlers, generation 1's best
    is written."""
    import distsim.runner.session as session_module
    import distsim.search.__main__ as entry
    import distsim.search.driver as driver
    import distsim.search.evaluate as evaluate_module

    session, exits = Session(), []
    inner = fake_evaluate([])

    def evaluate(configs, seeds, sweep):
        if sweep.name == "gen_001_race":
            raise KeyboardInterrupt
        return inner(configs, seeds, sweep)

    def exit_now(status):
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(session_module, "connect", lambda *a, **k: session)
    monkeypatch.setattr(session_module, "exit_now", exit_now)
    monkeypatch.setattr(driver, "check_scenarios", lambda *a: None)  # composes every family: not what is tested
    monkeypatch.setattr(evaluate_module, "make_evaluator", lambda *a, **k: evaluate)
    from distsim.config.compose import CONF_DIR

    monkeypatch.setattr(sys, "argv", ["distsim.search", f"--config-path={CONF_DIR}", f"hydra.run.dir={tmp_path}",
                                      "search.population=4", "search.holdout_seeds=[]"])  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == 130 and exits == [130]
    assert session.calls == ["abandon"]  # never a graceful shutdown that waits for Ray's processes
    assert "distsim.search: interrupted" in capsys.readouterr().err
    policy = yaml.safe_load((tmp_path / "policy" / "evolved.yaml").read_text())
    assert policy["routing"]["kind"] == "weighted" and (tmp_path / "bundle.txt").exists()
