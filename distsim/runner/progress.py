"""The sweep's progress line on stderr: jobs done, running, failed, and the time left.

On a terminal the line is redrawn in place; into a file or a CI log it is printed at most every
``log_every_s`` seconds, so logs stay short. ETA = elapsed / finished x remaining, from this run's
own jobs (jobs skipped by resume do not count as speed).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from distsim.progress import clock


@dataclass
class Progress:
    total: int
    skipped: int = 0
    enabled: bool = True
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    log_every_s: float = 10.0
    done: int = 0
    failed: int = 0
    running: int = 0
    _t0: float = field(default_factory=time.perf_counter)
    _last: float = 0.0
    _width: int = 0

    @property
    def tty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self) -> str:
        finished = self.done + self.failed
        left = self.total - self.skipped - finished
        elapsed = time.perf_counter() - self._t0
        eta = clock(elapsed / finished * left) if finished else "?"
        width = 24
        filled = int(width * (finished + self.skipped) / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        resumed = f"  {self.skipped} resumed" if self.skipped else ""
        return (
            f"sweep [{bar}] {finished + self.skipped}/{self.total} done{resumed}  {self.running} running  "
            f"{self.failed} failed  elapsed {clock(elapsed)}  ETA {eta}"
        )

    def update(
        self, *, running: int | None = None, ok: int = 0, failed: int = 0, force: bool = False
    ) -> None:
        self.done += ok
        self.failed += failed
        if running is not None:
            self.running = running
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            text = self.line()
            pad = max(self._width - len(text), 0)
            self._width = len(text)
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
        elif force or now - self._last >= self.log_every_s:
            self._last = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self.running = 0
        if self.tty:
            self.update(force=True)
            self.stream.write("\n")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
