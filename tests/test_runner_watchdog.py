"""The watchdog's bound on a job's attempt: explicit, or derived from the sweep's finished jobs."""

from __future__ import annotations

import pytest

from distsim.errors import ConfigError
from distsim.runner.settings import RunnerSettings
from distsim.runner.watchdog import FIRST_S, FLOOR_S, K, Watchdog


def test_an_explicit_timeout_is_the_bound_for_every_configuration():
    dog = Watchdog(2.5)
    dog.finished("a", 100.0)
    assert dog.bound_s("a") == dog.bound_s("b") == 2.5
    assert dog.describe("a") == "2.5 s (runner.job_timeout_s)"


def test_the_derived_bound_follows_the_slowest_finished_job_of_the_same_configuration():
    dog = Watchdog()
    assert dog.bound_s("big") == FIRST_S  # nothing of it finished yet
    dog.finished("small", 0.2)
    assert dog.bound_s("small") == FLOOR_S and dog.bound_s("big") == FIRST_S  # a fast config never bounds another
    dog.finished("big", 30.0)
    dog.finished("big", 20.0)
    assert dog.bound_s("big") == K * 30.0
    assert "derived from the sweep's finished jobs" in dog.describe("big")


@pytest.mark.parametrize("value", [0, -1.0, float("nan")])
def test_a_timeout_that_is_not_positive_is_a_config_error(value):
    with pytest.raises(ConfigError, match=r"runner.job_timeout_s: must be > 0 seconds or null"):
        RunnerSettings(job_timeout_s=value).validate()
