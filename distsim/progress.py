"""A single run's progress line on stderr: simulated time, requests done, events per second, ETA.

The event loop is the hot path, and a line nobody may be watching must cost it nothing per event. So
the line is drawn by a daemon thread that wakes every ``interval_s`` and reads counters the simulation
keeps anyway: the loop's clock, the events it has run (:meth:`EventLoop.events_run`, read off its
sequence counter) and the recorder's list of finished requests. The thread only reads, so results are
byte-identical with the line on or off. It stays silent for the first ``delay_s`` of wall time (a short
run prints nothing); once it has drawn, the run's end completes the line with the wall time and a newline.

The ETA extrapolates the share done: requests finished out of the workload's count when it is known
(``workload.num_requests``, a trace's rows), simulated time out of the end when that is known
(``workload.duration_s``, ``sim.horizon_s``), whichever is further along.

``sim.progress`` switches it for ``python -m distsim``: true, false, or null (the default) for "when
stderr is a terminal". Sweep jobs never draw one (their driver shows its own line); from Python,
``simulate(cfg, progress=True)``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from distsim.request import Request
from distsim.workload.base import WorkloadSource


@dataclass(frozen=True)
class ProgressSettings:
    stream: TextIO | None = None  # None: sys.stderr when the run starts
    interval_s: float = 1.0  # redraw period
    delay_s: float = 3.0  # wall time before the first line


DEFAULTS = ProgressSettings()  # what ``progress=True`` means


def wanted(setting: bool | None, stream: object) -> bool:
    """``sim.progress``: true or false, or null for "when ``stream`` is a terminal"."""
    if setting is None:
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())
    return bool(setting)


def expected_requests(workload: Iterable[Request]) -> int | None:
    """How many requests the run will see, when the workload says (a list given by the caller, a
    synthetic workload's num_requests, a trace's rows capped by num_requests); None if unknown."""
    if isinstance(workload, Sized):
        return len(workload)
    if not isinstance(workload, WorkloadSource):
        return None
    rows = (workload.summary() or {}).get("rows")
    known = [n for n in (workload.limit, rows) if isinstance(n, int)]
    return min(known) if known else None


def expected_end_us(workload: Iterable[Request], horizon_us: int | None) -> int | None:
    """The simulated instant the run ends by, when known: the horizon, else the arrivals' duration (the
    run then drains, so the share by time is capped below 1)."""
    duration = workload.duration_us if isinstance(workload, WorkloadSource) else None
    known = [t for t in (horizon_us, duration) if isinstance(t, int) and t > 0]
    return min(known) if known else None


def clock(seconds: float) -> str:
    """Seconds as ``m:ss``, or ``h:mm:ss`` from an hour on (the progress lines' elapsed and ETA)."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rate(per_s: float) -> str:
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.2f}{suffix}"
    return f"{per_s:.0f}"


class ProgressLine:
    """The thread that draws the line; use as a context manager around ``loop.run()``.

    ``now_us``, ``events`` and ``done`` are cheap reads of the running simulation (called from the
    thread); ``total`` and ``end_us`` are what the ETA extrapolates to (None: unknown).
    """

    def __init__(
        self,
        now_us: Callable[[], int],
        events: Callable[[], int],
        done: Callable[[], int],
        *,
        total: int | None = None,
        end_us: int | None = None,
        settings: ProgressSettings | None = None,
    ):
        self.now_us, self.events, self.done = now_us, events, done
        self.total, self.end_us = total, end_us
        self.settings = settings or DEFAULTS
        self.stream: TextIO = self.settings.stream or sys.stderr
        self.drawn = 0  # lines drawn so far
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._last = (0.0, 0)  # (wall, events) at the previous draw
        self._width = 0

    def __enter__(self) -> ProgressLine:
        self._t0 = time.perf_counter()
        self._last = (self._t0, self.events())
        self._thread = threading.Thread(target=self._loop, name="distsim-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.drawn:
            self._draw(final=True)
            self.stream.write("\n")
            self.stream.flush()

    def _loop(self) -> None:
        if self._stop.wait(self.settings.delay_s):
            return
        while True:
            self._draw()
            if self._stop.wait(self.settings.interval_s):
                return

    def fraction(self, now_us: int, done: int) -> float | None:
        """The share of the run done, by requests or by simulated time (None: neither is known)."""
        shares = []
        if self.total:
            shares.append(min(done / self.total, 1.0))
        if self.end_us:
            shares.append(min(now_us / self.end_us, 0.99))
        return max(shares) if shares else None

    def line(self, *, final: bool = False) -> str:
        wall = time.perf_counter()
        now_us, events, done = self.now_us(), self.events(), self.done()
        elapsed = wall - self._t0
        last_wall, last_events = self._last
        self._last = (wall, events)
        span = wall - last_wall
        rate = (events - last_events) / span if span > 0 and not final else events / max(elapsed, 1e-9)
        requests = f"{done:,}/{self.total:,}" if self.total else f"{done:,}"
        if final:
            tail = f"done in {clock(elapsed)}"
        else:
            share = self.fraction(now_us, done)
            eta = clock(elapsed * (1.0 - share) / share) if share else "?"
            tail = f"elapsed {clock(elapsed)}  ETA {eta}"
        return (
            f"distsim: simulated {now_us / 1e6:,.1f} s  requests {requests}  "
            f"{_rate(rate)} events/s  {tail}"
        )

    def _draw(self, *, final: bool = False) -> None:
        text = self.line(final=final)
        pad = max(self._width - len(text), 0)
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.drawn += 1
