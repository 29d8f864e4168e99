"""A pool of SimWorker actors fed one job at a time, with dead or hung workers replaced and their jobs
retried.

Each actor holds at most one job, so when a worker process dies exactly one job is lost and is retried
on a fresh actor (up to ``max_retries`` times); a job that raises is not retried, because the same
config and seed would raise again. A job that does not come back within the watchdog's bound
(distsim.runner.watchdog) is lost the same way: its actor is killed and replaced and the job resubmitted.
Rows are gathered with ``ray.wait`` as jobs finish; the driver orders them by job, so a retried job's
row lands where it would have.
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
from distsim.runner.watchdog import START_S, Watchdog


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
    on_retry: Callable[[Job, int, str], None] = lambda job, attempt, why: None  # before resubmitting


@dataclass
class Flight:
    """A job on an actor: its slot and the start of its attempt's clock (None while the actor starts)."""

    slot: int
    job: Job
    since: float | None


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
    watchdog: Watchdog = field(default_factory=Watchdog)
    start_s: float = START_S  # how long a job waits for its actor to start before it counts as lost

    def __post_init__(self) -> None:
        self._cls = remote_worker_class()
        self._booting: dict[Any, int] = {}  # an actor's readiness ref -> its slot, until it is ready
        self._born: dict[int, float] = {}  # slot -> when its actor was asked for (perf_counter)
        self._ready: set[int] = set()  # slots whose actor has started
        self._actors = [self._new_actor(slot) for slot in range(self.size)]

    def _new_actor(self, slot: int) -> Any:
        actor = self._cls.options(**self.actor_options).remote(*self.init_args)
        self._booting[actor.__ray_ready__.remote()] = slot
        self._born[slot] = time.perf_counter()
        return actor

    def _replace(self, slot: int) -> None:
        """Kill the slot's actor; its successor is made when the slot next takes a job (``_actor``), so a
        sweep that ends here leaves no actor starting behind it (one Ray may still place after the kill)."""
        import ray

        ray.kill(self._actors[slot], no_restart=True)
        self._booting = {ref: s for ref, s in self._booting.items() if s != slot}
        self._ready.discard(slot)
        self._actors[slot] = None
        self.replaced += 1

    def _actor(self, slot: int) -> Any:
        if self._actors[slot] is None:
            self._actors[slot] = self._new_actor(slot)
        return self._actors[slot]

    def _lost(
        self, flight: Flight, attempts: int, reason: str, kind: str, events: PoolEvents, pending: deque[Job]
    ) -> dict | None:
        """A job whose worker died or hung: its actor replaced, the job back first in ``pending`` while
        retries are left (None), else its failed row."""
        self._replace(flight.slot)
        if attempts <= self.max_retries:
            events.on_retry(flight.job, attempts + 1, reason)
            pending.appendleft(flight.job)
            return None
        error = f"{reason}, on each of {attempts} tries" if attempts > 1 else reason
        return failed_row(flight.job, error, kind, **{RUN_PREFIX + "attempts": attempts})

    def _collect(
        self, ref: Any, flight: Flight, attempts: int, events: PoolEvents, pending: deque[Job]
    ) -> dict | None:
        """The row of a finished call; None when its worker died and the job goes back to ``pending``."""
        import ray
        from ray.exceptions import ObjectLostError, RayActorError, RayError, WorkerCrashedError

        tries = {RUN_PREFIX + "attempts": attempts}
        try:
            row = ray.get(ref)
            row.update(tries)
            if flight.since is not None:
                self.watchdog.finished(flight.job.config_key, time.perf_counter() - flight.since)
            return row
        except (RayActorError, WorkerCrashedError, ObjectLostError) as err:
            reason = f"its worker died ({type(err).__name__})"
            return self._lost(flight, attempts, reason, "worker_died", events, pending)
        except RayError as err:  # outside execute's own guard: record, do not retry
            first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            return failed_row(flight.job, first, "exception", **tries)

    def _started(self, in_flight: dict[Any, Flight], now: float) -> None:
        """Start the clock of each job whose actor has become ready since the last look."""
        import ray

        if not self._booting:
            return
        ready, _ = ray.wait(list(self._booting), num_returns=len(self._booting), timeout=0)
        self._ready.update(self._booting.pop(ref) for ref in ready)
        for flight in in_flight.values():
            if flight.since is None and flight.slot in self._ready:
                flight.since = now

    def _overdue(self, in_flight: dict[Any, Flight], now: float) -> list[tuple[Any, Flight, str]]:
        """The jobs past their bound, each with why: an attempt past the watchdog's bound, or a job whose
        actor has not started within ``START_S`` (an actor Ray cannot place would otherwise hold its job,
        and the sweep, for ever)."""
        late = []
        for ref, flight in in_flight.items():
            if flight.since is not None:
                if now - flight.since > self.watchdog.bound_s(flight.job.config_key):
                    late.append((ref, flight, f"no result within {self.watchdog.describe(flight.job.config_key)}"))
            elif now - self._born[flight.slot] > self.start_s:
                late.append((ref, flight, f"its worker did not start within {self.start_s:g} s"))
        return late

    def run(
        self, jobs: list[Job], key_of: Callable[[Job], str], events: PoolEvents, tick_s: float = 0.5
    ) -> list[dict]:
        """Run ``jobs`` and return their rows (in completion order)."""
        import ray

        pending = deque(jobs)
        attempts = {job.index: 0 for job in jobs}
        idle = list(range(self.size))
        in_flight: dict[Any, Flight] = {}
        rows: list[dict] = []

        def done(row: dict | None, slot: int) -> None:
            if row is not None:
                rows.append(row)
                events.on_row(row)
            idle.append(slot)

        while pending or in_flight:
            t0 = time.perf_counter()
            while idle and pending:
                slot, job = idle.pop(), pending.popleft()
                attempts[job.index] += 1
                ref = self._actor(slot).run.remote(job, self.sweep_dir, [self.config_refs[key_of(job)]])
                in_flight[ref] = Flight(slot, job, t0 if slot in self._ready else None)
            t1 = time.perf_counter()
            self.times.submit_s += t1 - t0
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=tick_s)
            t2 = time.perf_counter()
            for ref in ready:
                flight = in_flight.pop(ref)
                done(self._collect(ref, flight, attempts[flight.job.index], events, pending), flight.slot)
            self._started(in_flight, t2)
            for ref, flight, reason in self._overdue(in_flight, time.perf_counter()):
                del in_flight[ref]
                n = attempts[flight.job.index]
                done(self._lost(flight, n, reason, "timeout", events, pending), flight.slot)
            self.times.collect_s += time.perf_counter() - t2
            events.on_tick(len(in_flight))
        self.times.jobs += len(jobs)
        return rows

    def close(self) -> None:
        import ray

        for actor in self._actors:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        self._actors = []
