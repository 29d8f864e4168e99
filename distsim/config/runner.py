"""Runner config schema: where sweeps run (Ray) and how faults are handled.

None of these settings changes a simulation's results, so ``runner.*`` overrides are left out of a job's
identity (its ``overrides`` and ``config`` columns) and a sweep can be resumed with other runner settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunnerConfig:
    address: str | None = (
        None  # null: local Ray; "auto", "host:port" or "ray://host:port": an existing cluster
    )
    num_workers: int | None = None  # null: one actor per CPU of the cluster
    max_retries: int = 2  # re-runs of a job whose worker process died or hung (a job that raises is not retried)
    # seconds an attempt of a job may run before its worker counts as hung (killed, replaced, the job
    # resubmitted); null: 10 x the slowest finished job of its configuration, at least 60 s, and 3600 s
    # while none has finished (distsim.runner.watchdog)
    job_timeout_s: float | None = None
    progress: bool = True  # the progress line on stderr (done, running, failed, ETA)
    resume: bool = True  # skip jobs whose directory already holds a complete result for the same overrides
    strict: bool = False  # exit non-zero when any job failed (default: only when every job failed)
    # null: ship distsim via runtime_env py_modules to a remote cluster unless the driver already runs with a
    # working_dir (ray job submit)
    ship_package: bool | None = None
    alpha: float = 0.05  # significance level of the paired comparison against the best configuration
    # a sweep directory holding a different sweep: false refuses it; true deletes that sweep's job
    # directories and tables first (a directory holding the same sweep is resumed either way)
    overwrite: bool = False
    # seconds Ray may take to start (or to be joined) before the start is tried once more and then fails with
    # one line: Ray's own raylet registration wait is a fixed 30 s, too short on a busy machine
    start_timeout_s: float = 120.0
    # nice levels Ray adds to its workers over the raylet's (a local Ray's raylet runs at the driver's
    # priority); Ray's own default, 15, starves a sweep's jobs beside anything at normal priority
    worker_niceness: int = 0
