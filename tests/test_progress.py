"""The progress line of a long single run (distsim.progress): what it shows, that it changes nothing,
and when it stays silent."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from distsim import load_config, simulate
from distsim.events.loop import EventLoop
from distsim.progress import ProgressLine, ProgressSettings, wanted
from distsim.simulate import summary_json

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["workload.num_requests=300", "workload.arrival.rate_rps=30", "cluster.instances=2"]
LINE = re.compile(
    r"distsim: simulated (?P<sim>[\d,]+\.\d) s  requests (?P<done>[\d,]+)/(?P<total>[\d,]+)  "
    r"(?P<rate>[\d.]+[kM]?) events/s  (?P<tail>.*?)\s*$"
)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def number(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6}.get(text[-1], 1.0)
    return float(text.rstrip("kM").replace(",", "")) * scale


def drawn(text: str) -> list[re.Match]:
    """The lines drawn, in order (each starts with a carriage return)."""
    assert text.startswith("\r") and text.endswith("\n"), repr(text[:80] + text[-80:])
    return [LINE.match(part) for part in text[1:-1].split("\r")]


def test_the_line_shows_simulated_time_requests_events_per_second_and_ends_with_a_newline():
    stream = io.StringIO()
    cfg = load_config(SMALL)
    result = simulate(cfg, progress=ProgressSettings(stream=stream, interval_s=0.002, delay_s=0.0))
    lines = drawn(stream.getvalue())
    assert all(lines), stream.getvalue()
    assert len(lines) >= 2  # at least one draw while running, and the final one
    *running, final = lines
    assert all(m["total"] == "300" for m in lines)
    done = [int(m["done"].replace(",", "")) for m in lines]
    sim = [number(m["sim"]) for m in lines]
    assert done == sorted(done) and sim == sorted(sim)  # never backwards
    assert all(m["tail"].startswith("elapsed ") and " ETA " in m["tail"] for m in running)
    assert final["tail"].startswith("done in ")
    assert done[-1] == 300 == result.summary["requests"]["arrived"]
    assert sim[-1] >= result.summary["sim"]["simulated_s"] - 0.05  # the loop's clock ends at the span's end or later
    # the final rate is the loop's average (events over its wall time): at least perf.json's, whose wall
    # time includes building the world and measuring
    assert number(final["rate"]) >= 0.5 * result.perf["events_per_s"] > 0


def test_results_are_identical_with_the_line_on_and_off(tmp_path):
    cfg = load_config(SMALL)
    off = simulate(cfg)
    on = simulate(cfg, progress=ProgressSettings(stream=io.StringIO(), interval_s=0.001, delay_s=0.0))
    assert summary_json(on.summary) == summary_json(off.summary)
    off.write(tmp_path / "off")
    on.write(tmp_path / "on")
    for name in ("summary.json", "requests.parquet", "instances.parquet"):
        assert (tmp_path / "on" / name).read_bytes() == (tmp_path / "off" / name).read_bytes(), name


def test_a_short_run_prints_nothing():
    stream = io.StringIO()
    simulate(load_config(SMALL), progress=ProgressSettings(stream=stream, delay_s=60.0))
    assert stream.getvalue() == ""


def test_auto_means_when_stderr_is_a_terminal():
    assert not wanted(None, io.StringIO())
    assert wanted(None, FakeTerminal())
    assert not wanted(False, FakeTerminal())
    assert wanted(True, io.StringIO())
    assert not wanted(None, object())  # no isatty at all


# ``python -m distsim`` with the progress line's delay and interval cut short
CLI = """
import runpy, sys
from distsim import progress
progress.DEFAULTS = progress.ProgressSettings(interval_s=0.05, delay_s=0.0)
sys.argv = ["distsim", *sys.argv[1:]]
runpy.run_module("distsim", run_name="__main__", alter_sys=True)
"""


def _cli(tmp_path, *overrides: str, terminal: bool = False) -> str:
    """Run the CLI with progress drawn at once; its stderr, a pipe or (``terminal``) a pseudo-terminal."""
    argv = [sys.executable, "-c", CLI, *SMALL, f"hydra.run.dir={tmp_path}", *overrides]
    if not terminal:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal's other end closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave, timeout=600)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode()


def test_the_cli_with_auto_and_a_stderr_that_is_no_terminal_prints_no_line(tmp_path):
    assert "distsim: simulated" not in _cli(tmp_path / "auto")  # sim.progress null, stderr a pipe
    assert "distsim: simulated" not in _cli(tmp_path / "off", "sim.progress=false", terminal=True)


def test_the_cli_draws_the_line_on_a_terminal_or_when_switched_on(tmp_path):
    for err in (_cli(tmp_path / "auto", terminal=True), _cli(tmp_path / "on", "sim.progress=true")):
        assert "distsim: simulated" in err and "requests 300/300" in err and "done in" in err
        assert err.rstrip(" ").endswith("\n")
    assert (tmp_path / "on" / "summary.json").read_bytes() == (tmp_path / "auto" / "summary.json").read_bytes()


def test_the_eta_extrapolates_the_share_done():
    state = {"now": 0, "events": 0, "done": 0}
    line = ProgressLine(lambda: state["now"], lambda: state["events"], lambda: state["done"], total=100)
    line._t0 = time.perf_counter() - 10.0  # 10 s elapsed
    state.update(now=5_000_000, done=25)
    assert line.line().endswith("elapsed 0:10  ETA 0:30")  # a quarter done in 10 s: 30 s to go
    by_time = ProgressLine(lambda: state["now"], lambda: 0, lambda: 0, end_us=20_000_000)
    by_time._t0 = time.perf_counter() - 10.0
    assert by_time.line().endswith("ETA 0:30")  # 5 of 20 simulated seconds
    unknown = ProgressLine(lambda: 1, lambda: 0, lambda: 0)
    unknown._t0 = time.perf_counter()
    assert unknown.line().endswith("ETA ?") and "requests 0 " in unknown.line()


def test_the_loop_counts_its_events_without_a_per_event_counter():
    loop = EventLoop()
    seen = []
    loop.after_event = lambda now: seen.append(loop.events_run())

    def chain(now: int, left: int) -> None:
        if left:
            loop.schedule(now + 1, 0, chain, left - 1)

    loop.schedule(0, 0, chain, 4)
    loop.schedule(0, 1, lambda now, arg: None)
    assert loop.events_run() == 0
    loop.run()
    assert seen == [1, 2, 3, 4, 5, 6] and loop.events_run() == loop.events == 6
