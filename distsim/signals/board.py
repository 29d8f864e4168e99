"""Signals routers read, and how stale they are.

Instances push their state into the board's live arrays as it changes (a few array writes per
event, never a copy of cache state). With ``refresh_interval_ms == 0`` and no transport delay,
routers read those live arrays. Otherwise each signal is scraped on its own cadence (interval,
uniform jitter from the "signals" RNG stream) and the snapshot becomes visible after the transport
delay, like a metrics scrape. A scrape copies a few small arrays, so stale signals cost little.

Every signal costs O(1) per change, whatever the fleet size. KV use inside a fast-forwarded decode run
changes at step boundaries the instance never visits one by one: the board keeps each such run's blocks
as of the last read in ``kv_run`` and, in ``holds_until``, the last instant that value holds (the end of
the step before the next one that takes a block; never when no later step of the run takes one); a read
finds the runs whose value changed since with one vectorised comparison and recomputes only those (a
closed form from the decode set's aggregates), so reads agree with stepping one by one at a cost bounded
by the steps simulated, and no read recomputes a run whose value has not changed. Until something reads KV use, the board only notes
which instances have a run in flight, and starts following them at that first read. A run starts with
nothing computed (it has taken no block yet); the first read after one of its steps takes a block
recomputes it. A policy that prefers low KV use need not bring every run up to date: :meth:`kv_bound`
gives the values as last brought up to date (each at most the true one) and :meth:`kv_exact` the true
value of one slot, so only the candidates that could win are recomputed (distsim.policies.weighted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from distsim.events.loop import PRIO_CLUSTER, EventLoop
from distsim.protocols import RunSource, SignalSource
from distsim.signals.settings import SIGNALS, SignalSettings

NEVER = np.iinfo(np.int64).max  # holds_until of a slot with no run followed, or none of whose later steps takes a block


class SignalBoard:
    def __init__(
        self, instances: Sequence[SignalSource], settings: SignalSettings, loop: EventLoop,
        rng: np.random.Generator,
    ):
        n = len(instances)
        self.instances = instances
        self.loop = loop
        self.rng = rng
        self.waiting = np.zeros(n, dtype=np.int64)
        self.running = np.zeros(n, dtype=np.int64)
        self.kv_used = np.zeros(n, dtype=np.int64)
        self.queued_tokens = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.prompt_tokens = np.zeros(n, dtype=np.int64)
        self.kv_total = np.array([inst.kv.total for inst in instances], dtype=np.float64)
        for slot, inst in enumerate(instances):
            inst.slot = slot  # the instance's row in this board's arrays
        # fast-forwarded runs (pushed instances): blocks taken beyond the run's first step, as of the last
        # read, and the last instant that value holds (NEVER: no run, or no later block in it). Before
        # the first read of KV use, only the instances with a run in flight, by slot.
        self.kv_run = np.zeros(n, dtype=np.int64)
        self.holds_until = np.full(n, NEVER, dtype=np.int64)
        self._earliest = NEVER  # at most holds_until.min(): a read before it has nothing to bring up to date
        self._following = False
        self._in_run: dict[int, RunSource] = {}
        self.cadence = settings.cadence
        self.delay_us = settings.transport_delay_us
        self.live = settings.live
        self.pushed = False  # instances push their state here only when a policy reads it live
        self.published: dict[str, np.ndarray] = {}
        self.scraped_at: dict[str, int] = dict.fromkeys(SIGNALS, 0)  # when the published snapshot was taken (us)
        self.scrapes = 0
        self._active: Callable[[], bool] = lambda: True

    # ---------------------------------------------------------------- reading
    def read(self, name: str) -> np.ndarray:
        if self.live or self.cadence[name][0] == 0 and self.delay_us == 0:
            return self.current(name, self.loop.now)
        return self.published[name]

    def age_us(self, name: str) -> int:
        """How old the value a read of ``name`` returns is: 0 when read live, else since its scrape."""
        if self.live or self.cadence[name][0] == 0 and self.delay_us == 0:
            return 0
        return self.loop.now - self.scraped_at[name]

    def enable_push(self) -> None:
        """Have instances push their state on every change (live reads by a policy)."""
        self.pushed = True
        for inst in self.instances:
            inst.attach(self)

    def current(self, name: str, now: int) -> np.ndarray:
        """The live value of a signal at ``now``."""
        if not self.pushed:
            self._pull()
        if name == "queue_depth":
            return self.waiting
        if name == "running":
            return self.running
        if name == "queued_tokens":
            return self.queued_tokens
        if name == "kv_utilization":
            if not self.pushed:
                return self.kv_used / self.kv_total
            if not self._following:
                self._follow_runs()
            if self._earliest < now:
                self._advance_runs(now)
            return (self.kv_used + self.kv_run) / self.kv_total
        if name == "cache_hit_rate":
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = self.cached_tokens / self.prompt_tokens
            return np.nan_to_num(rate, nan=0.0)
        raise KeyError(name)

    # ---------------------------------------------------------------- fast-forwarded runs
    def run_started(self, inst: RunSource, now: int) -> None:
        """A pushed instance planned a run of decode steps (it took the first step's blocks already).
        Nothing is computed yet: at ``now`` the run has taken nothing beyond its first step, and the
        first later read that needs the value brings it up to date (many runs are never read inside)."""
        slot = inst.slot
        if self._following:
            self.kv_run[slot] = 0
            self.holds_until[slot] = now
            if now < self._earliest:
                self._earliest = now
        else:
            self._in_run[slot] = inst

    def run_ended(self, inst: RunSource) -> None:
        """The run was applied: its blocks are in the instance's own count (pushed with the event)."""
        slot = inst.slot
        if self._following:
            self.holds_until[slot] = NEVER
            self.kv_run[slot] = 0
        else:
            self._in_run.pop(slot, None)

    def _follow_runs(self) -> None:
        """The first read of KV use: follow the runs in flight from now on (and every later one). Their
        values are brought up to date by the read itself (0 is at most what each has taken)."""
        self._following = True
        for slot in self._in_run:
            self.kv_run[slot] = 0
            self.holds_until[slot] = -1
        if self._in_run:
            self._earliest = -1
        self._in_run.clear()

    def _advance_runs(self, now: int) -> None:
        """Bring ``kv_run`` to ``now`` for the runs whose value changed since the last read."""
        holds = self.holds_until
        self._bring_up_to_date((holds < now).nonzero()[0].tolist(), now)
        self._earliest = int(holds[holds.argmin()])

    def _bring_up_to_date(self, slots: list[int], now: int) -> None:
        """``kv_run`` and ``holds_until`` of ``slots`` (runs followed) as of ``now``."""
        holds = self.holds_until
        instances = self.instances
        kv_run = self.kv_run
        for slot in slots:  # one call per run: its blocks by now and the last instant they hold
            blocks, until = instances[slot].run_blocks_at(now)
            kv_run[slot] = blocks
            holds[slot] = until if until >= 0 else NEVER

    # ---------------------------------------------------------------- bounded KV reads
    def kv_bound(self) -> tuple[np.ndarray, bool]:
        """KV use as a read of ``kv_utilization`` now would return it, without bringing the runs up to
        date: every value is at most the true one (a run only takes blocks), exact except at the slots
        :meth:`kv_loose` names; the flag is False when there are none. A policy that prefers low KV use
        then asks :meth:`kv_exact` only of the slots that could win."""
        if not (self.live or self.cadence["kv_utilization"][0] == 0 and self.delay_us == 0):
            return self.published["kv_utilization"], False
        now = self.loop.now
        if not self.pushed:
            return self.current("kv_utilization", now), False
        if not self._following:
            self._follow_runs()
        return (self.kv_used + self.kv_run) / self.kv_total, self._earliest < now

    def kv_loose(self) -> np.ndarray:
        """The slots (ascending) whose value from :meth:`kv_bound` may be below the true one."""
        if not (self.pushed and self._following) or self._earliest >= self.loop.now:
            return np.zeros(0, dtype=np.int64)
        return (self.holds_until < self.loop.now).nonzero()[0]

    def kv_loose_at(self, slots: np.ndarray) -> np.ndarray:
        """For each of ``slots``: whether its value from :meth:`kv_bound` may be below the true one."""
        return self.holds_until[slots] < self.loop.now

    def kv_exact(self, slot: int) -> float | None:
        """The true KV use of ``slot`` now, brought up to date, where :meth:`kv_bound` gave less (else
        None): the float a full read gives there."""
        now = self.loop.now
        if self.holds_until[slot] >= now:
            return None
        self._bring_up_to_date([slot], now)
        return (int(self.kv_used[slot]) + int(self.kv_run[slot])) / float(self.kv_total[slot])

    def _pull(self) -> None:
        """Read every instance's state (a scrape without pushes: a few fields per instance)."""
        for inst in self.instances:
            inst.publish_to(self)

    # ---------------------------------------------------------------- scraping
    def start(self, active: Callable[[], bool]) -> None:
        """Begin the scrapes (stale mode). ``active`` tells whether the cluster still has work; scrapes
        stop when it has none, so the run can end."""
        if self.live:
            return
        self._active = active
        for name in SIGNALS:
            self.published[name] = self.current(name, 0).copy()
            interval, _ = self.cadence[name]
            if interval > 0:
                self.loop.schedule(self._next(name, 0), PRIO_CLUSTER, self._scrape, name)

    def _next(self, name: str, now: int) -> int:
        interval, jitter = self.cadence[name]
        if jitter:
            interval += int(self.rng.integers(-jitter, jitter + 1))
        return now + max(interval, 1)

    def _scrape(self, now: int, name: str) -> None:
        self.scrapes += 1
        snapshot = self.current(name, now).copy()
        if self.delay_us:
            self.loop.schedule(now + self.delay_us, PRIO_CLUSTER, self._publish, (name, snapshot))
        else:
            self.published[name] = snapshot
            self.scraped_at[name] = now
        if self._active():
            self.loop.schedule(self._next(name, now), PRIO_CLUSTER, self._scrape, name)

    def _publish(self, now: int, item: tuple[str, np.ndarray]) -> None:
        name, snapshot = item
        self.published[name] = snapshot
        self.scraped_at[name] = now - self.delay_us

