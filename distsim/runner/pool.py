"""A pool of SimWorker actors fed one job at a time, with dead workers replaced and their jobs retried.

Each actor holds at most one job, so when a worker process dies exactly one job is lost and is retried
on a fresh actor (up to ``max_retries`` times); a job that raises is not retried, because the same
config and seed would raise again. Rows are gathered with ``ray.wait`` as jobs finish.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distsim.runner.actor import remote_worker_class
from distsim.runner.plan import Job
from distsim.runner.rows import RUN_PREFIX, failed_row


@dataclass
class DriverTimes:
    """The driver's own time, in seconds: per-job overhead (compose, submit, collect) apart from the
    one-off start-up (Ray, actors) and the final tables, so the per-job figure is not diluted."""

    compose_s: float = 0.0  # Hydra composition, once per distinct configuration
    submit_s: float = 0.0  # actor calls
    collect_s: float = 0.0  # ray.wait bookkeeping, ray.get of the rows, progress
    startup_s: float = 0.0  # Ray start or join, actor creation, configs into the object store
    finalize_s: float = 0.0  # results.parquet, ranking, ranking.csv
    jobs: int = 0

    def per_job_ms(self) -> dict[str, float]:
        n = max(self.jobs, 1)
        parts = {"compose": self.compose_s, "submit": self.submit_s, "collect": self.collect_s}
        out = {k: round(1000 * v / n, 3) for k, v in parts.items()}
        out["total"] = round(sum(out.values()), 3)
        return out


@dataclass
class PoolEvents:
    """Callbacks for progress: called from the driver loop."""

    on_row: Callable[[dict[str, Any]], None] = lambda row: None
    on_tick: Callable[[int], None] = lambda running: None


@dataclass
class ActorPool:
    size: int
    sweep_dir: str
    config_refs: dict[str, Any]  # compose key -> ObjectRef of the pickled config (may be set after start)
    max_retries: int = 2
    actor_options: dict[str, Any] = field(default_factory=dict)
    init_args: tuple[Any, ...] = ()
    times: DriverTimes = field(default_factory=DriverTimes)
    replaced: int = 0

    def __post_init__(self) -> None:
        self._cls = remote_worker_class()
        self._actors = [self._new_actor() for _ in range(self.size)]

    def _new_actor(self) -> Any:
        return self._cls.options(**self.actor_options).remote(*self.init_args)

    def _replace(self, slot: int) -> None:
        import ray

        ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = self._new_actor()
        self.replaced += 1

    def _collect(self, ref: Any, slot: int, job: Job, attempts: int, pending: deque[Job]) -> dict | None:
        """The row of a finished call; None when its worker died and the job goes back to ``pending``."""
        import ray
        from ray.exceptions import ObjectLostError, RayActorError, RayError, WorkerCrashedError

        tries = {RUN_PREFIX + "attempts": attempts}
        try:
            row = ray.get(ref)
            row.update(tries)
            return row
        except (RayActorError, WorkerCrashedError, ObjectLostError) as err:
            self._replace(slot)
            if attempts <= self.max_retries:
                pending.appendleft(job)
                return None
            return failed_row(
                job, f"worker died {attempts} times: {type(err).__name__}", "worker_died", **tries
            )
        except RayError as err:  # outside execute's own guard: record, do not retry
            first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            return failed_row(job, first, "exception", **tries)

    def run(
        self, jobs: list[Job], key_of: Callable[[Job], str], events: PoolEvents, tick_s: float = 0.5
    ) -> list[dict]:
        """Run ``jobs`` and return their rows (in completion order)."""
        import ray

        pending = deque(jobs)
        attempts = {job.index: 0 for job in jobs}
        idle = list(range(self.size))
        in_flight: dict[Any, tuple[int, Job]] = {}
        rows: list[dict] = []
        while pending or in_flight:
            t0 = time.perf_counter()
            while idle and pending:
                slot, job = idle.pop(), pending.popleft()
                attempts[job.index] += 1
                ref = self._actors[slot].run.remote(job, self.sweep_dir, [self.config_refs[key_of(job)]])
                in_flight[ref] = (slot, job)
            t1 = time.perf_counter()
            self.times.submit_s += t1 - t0
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=tick_s)
            t2 = time.perf_counter()
            for ref in ready:
                slot, job = in_flight.pop(ref)
                row = self._collect(ref, slot, job, attempts[job.index], pending)
                if row is not None:
                    rows.append(row)
                    events.on_row(row)
                idle.append(slot)
            self.times.collect_s += time.perf_counter() - t2
            events.on_tick(len(in_flight))
        self.times.jobs += len(jobs)
        return rows

    def close(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []
