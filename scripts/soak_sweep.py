"""Soak: a long sweep of short runs on the local Ray with a worker process killed (SIGKILL, from outside,
as the OOM killer or an operator would) every so often; it must finish with every job exactly once.

    python scripts/soak_sweep.py                          # 2,000 jobs, a worker killed every 60 s
    python scripts/soak_sweep.py --jobs 200 --kill-every-jobs 50

Checks, printed and written to scripts/results/soak_sweep.txt (the default run): every job has one row and
one result.json, all ok; the jobs whose worker was killed ran again (``run.attempts`` 2) and their
summary.json is byte-identical to the same overrides simulated in this process; no job ran twice to the
end (one row per job, none resumed). tests/test_cluster_faults.py runs a small version (count-based kills).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "soak_sweep.txt"
JOB = ["workload.num_requests=60", "cluster.instances=1", "workload.arrival.rate_rps=20"]


def _parents() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                out[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def sim_workers(root: int) -> list[int]:
    """The live SimWorker actor processes below ``root`` (the driver: its raylet starts them)."""
    parent = _parents()
    found = []
    for pid in parent:
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::SimWorker"):
                    found.append(pid)
            except OSError:
                continue
    return sorted(found)


@dataclass
class Killer:
    """A thread that SIGKILLs one SimWorker every ``every_s`` seconds or every ``every_jobs`` finished
    jobs (result.json files), whichever is set; ``kills`` records (pid, jobs finished then)."""

    sweep_dir: Path
    every_s: float | None = None
    every_jobs: int | None = None
    kills: list[tuple[int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _due(self, done: int, last: float) -> bool:
        if self.every_jobs is not None:
            return done >= (len(self.kills) + 1) * self.every_jobs
        return time.monotonic() - last >= self.every_s

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.1 if self.every_jobs else 1.0):
            done = sum(1 for _ in self.sweep_dir.glob("*/result.json"))
            if not self._due(done, last):
                continue
            workers = sim_workers(os.getpid())
            if workers:
                os.kill(workers[len(self.kills) % len(workers)], signal.SIGKILL)
                self.kills.append((workers[len(self.kills) % len(workers)], done))
                last = time.monotonic()

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def check(outcome: Any, jobs: int, sweep_dir: Path, job: list[str], sample: int = 5) -> dict[str, Any]:
    """What the soak promises, as figures: one ok row and one result.json per job, and the retried jobs'
    summary.json byte-identical to an in-process run of the same overrides."""
    from distsim import load_config, simulate
    from distsim.simulate import summary_json

    results = outcome.results
    retried = results[results["run.attempts"] > 1]
    same = 0
    for _, row in retried.head(sample).iterrows():
        mine = summary_json(simulate(load_config(row["overrides"].split())).summary)
        same += (sweep_dir / str(row["job"]) / "summary.json").read_text() == mine
    return {
        "jobs": jobs,
        "rows": len(results),
        "distinct_jobs": int(results["job"].nunique()),
        "ok": int((results["status"] == "ok").sum()),
        "result_files": sum(1 for _ in sweep_dir.glob("*/result.json")),
        "retried": len(retried),
        "replaced_workers": outcome.replaced_workers,
        "retried_checked_identical": f"{same} of {min(sample, len(retried))}",
        "wall_s": round(outcome.wall_s, 1),
    }


def soak(jobs: int, sweep_dir: Path, *, every_s: float | None = None, every_jobs: int | None = None,
         workers: int = 2, job: list[str] = JOB) -> tuple[dict[str, Any], list[tuple[int, int]]]:  # fmt: skip
    """Run the sweep with the killer; (the checked figures, the kills)."""
    from distsim.runner.api import sweep

    with Killer(sweep_dir, every_s, every_jobs) as killer:
        outcome = sweep([*job, f"seed=range({jobs})"], sweep_dir, num_workers=workers, max_retries=2,
                        progress=False, echo=False)  # fmt: skip
    return check(outcome, jobs, sweep_dir, job), killer.kills


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--kill-every-s", type=float, default=60.0)
    ap.add_argument("--kill-every-jobs", type=int, default=None, help="instead of --kill-every-s")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="soak_"))
    try:
        every_s = None if args.kill_every_jobs else args.kill_every_s
        figures, kills = soak(args.jobs, out / "sweep", every_s=every_s, every_jobs=args.kill_every_jobs,
                              workers=args.workers)  # fmt: skip
    finally:
        shutil.rmtree(out, ignore_errors=True)
    lines = [f"python scripts/soak_sweep.py {' '.join(sys.argv[1:])}".rstrip(),
             f"job: {' '.join(JOB)} seed=range({args.jobs}); {args.workers} workers; max_retries 2",
             f"kills (SIGKILL of a SimWorker, with the jobs finished then): {len(kills)}: "
             + ", ".join(str(done) for _, done in kills),
             *(f"{k}: {v}" for k, v in figures.items())]  # fmt: skip
    ok = (figures["rows"] == figures["distinct_jobs"] == figures["ok"] == figures["result_files"] == args.jobs
          and len(kills) > 0)  # fmt: skip
    lines.append("PASS: every job once, all ok" if ok else "FAIL")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.jobs == 2000 and not args.kill_every_jobs:
        RESULTS.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
