"""What a single ``python -m distsim`` run costs before and after the simulation itself.

Every figure is CPU seconds (user + system) of a fresh Python process, the median of ``--runs`` runs
(the machine is shared, so single runs vary). One child process walks through the stages of a single
run and reads ``time.process_time()`` after each:

    interpreter    Python's own start-up with this environment's site-packages (.pth files)
    cli imports    ``import distsim.__main__``: what the CLI imports before Hydra's main runs
    compose        ``distsim.load_config`` (Hydra compose of conf/config.yaml, schema included)
    sim imports    ``from distsim.simulate import simulate`` (0 while the package imports it eagerly)
    simulate       resolve, build and run 10 requests of the embedded default
    write          requests.parquet, instances.parquet, perf.json, summary.json and the printed table

Separately, the whole CLI process for the same 10-request run (``python -m distsim
workload.num_requests=10 hydra.run.dir=TMP``) is measured from outside (rusage of the child): it
includes Hydra's own run machinery (run directory, logging, .hydra/ files), which the stages leave out.
``--standard N`` also runs the standard benchmark's CLI process (scripts/bench.py, 50,000 requests) N
times; ``--importtime`` lists the packages whose own import time is largest; ``--callgrind`` counts the
instructions of the start-up alone, of the 10-request CLI process and of the standard benchmark's CLI
process with ``--callgrind-bench`` requests (5,000; valgrind; the machine's load does not change these
counts). Children run with bytecode caching on (Python's default) after one warm-up
run, whatever PYTHONDONTWRITEBYTECODE says here.

    python scripts/bench_startup.py                    # 7 runs of each
    python scripts/bench_startup.py --root /tmp/wt     # measure another checkout with this Python
    python scripts/bench_startup.py --standard 3 --callgrind --record   # as in scripts/results/bench_startup.txt
    python scripts/bench_startup.py --runs 0 --importtime 0 --callgrind   # instruction counts only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = ("interpreter", "cli imports", "compose", "sim imports", "simulate", "write")
SMALL = ["workload.num_requests=10"]

# Runs in the child: the stages of a single run, CPU seconds after each, as one JSON line.
CHILD = r"""
import json, sys, time
marks = [time.process_time()]
import distsim.__main__
marks.append(time.process_time())
from distsim.config.compose import load_config
cfg = load_config(sys.argv[2:])
marks.append(time.process_time())
from distsim.simulate import simulate
marks.append(time.process_time())
result = simulate(cfg)
marks.append(time.process_time())
from distsim.report_table import format_summary
result.write(sys.argv[1], write_requests=True)
format_summary(result.summary, sys.argv[1])
marks.append(time.process_time())
print(json.dumps(marks))
"""


def child_env(root: Path) -> dict[str, str]:
    """The checkout at ``root`` first on the path (ahead of an editable install of another one), and
    bytecode caching on, as Python's default is (PYTHONDONTWRITEBYTECODE would recompile every module
    of distsim in every process)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(argv: list[str], root: Path) -> tuple[float, str]:
    """CPU seconds (user + system) of one fresh process running ``argv`` in ``root``, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=root, env=child_env(root), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.stdout


def stages(root: Path, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in STAGES}
    out["stages process"] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cpu, stdout = run_child([sys.executable, "-c", CHILD, tmp, *SMALL], root)
        marks = json.loads(stdout.strip().splitlines()[-1])
        out["interpreter"].append(marks[0])
        for name, a, b in zip(STAGES[1:], marks, marks[1:]):
            out[name].append(b - a)
        out["stages process"].append(cpu)
    return out


def cli(root: Path, runs: int, overrides: list[str]) -> list[float]:
    cpus = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cpu, _ = run_child([sys.executable, "-m", "distsim", *overrides, f"hydra.run.dir={tmp}"], root)
        cpus.append(cpu)
    return cpus


def bare_python(runs: int, root: Path) -> list[float]:
    return [run_child([sys.executable, "-S", "-c", "pass"], root)[0] for _ in range(runs)]


def importtime(root: Path, top: int) -> list[str]:
    """The ``top`` modules with the largest own (self) import time under ``import distsim.__main__``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import distsim.__main__"],
        cwd=root, env=child_env(root), capture_output=True, text=True, check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        rows.append((int(own), int(cumulative), name))
    packages: dict[str, int] = {}
    for own, _, name in rows:
        packages[name.split(".")[0]] = packages.get(name.split(".")[0], 0) + own
    lines = [f"  {ms:7.1f} ms  {pkg}" for pkg, ms in sorted(((p, us / 1000) for p, us in packages.items()),
                                                             key=lambda x: -x[1])[:top]]
    return ["import time by top-level package (own time summed, -X importtime, one run):", *lines]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def instructions(root: Path, argv: list[str]) -> int:
    """Instructions one process executes (valgrind's callgrind): unlike CPU time, the machine's load
    does not change it."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", *argv],
            cwd=root, env=child_env(root), capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise SystemExit(f"failed under callgrind: {' '.join(argv)}\n{proc.stderr[-3000:]}")
    collected = [line for line in proc.stderr.splitlines() if "Collected :" in line]
    return int(collected[-1].split(":")[-1])


def callgrind_rows(root: Path, bench_requests: int) -> list[str]:
    sys.path.insert(0, str(HERE))
    from bench import overrides

    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import distsim.__main__": [sys.executable, "-c", "import distsim.__main__"],
            "python -m distsim " + " ".join(SMALL): [
                sys.executable, "-m", "distsim", *SMALL, f"hydra.run.dir={tmp}/run"
            ],
        }
        if bench_requests:
            runs[f"standard benchmark CLI, {bench_requests:,} requests"] = [
                sys.executable, "-m", "distsim", *overrides(bench_requests), f"hydra.run.dir={tmp}/bench"
            ]
        counts = {label: instructions(root, argv) for label, argv in runs.items()}
    return ["instructions (callgrind, one run each; millions):"] + [
        f"  {label:<44} {n / 1e6:9,.0f}M" for label, n in counts.items()
    ]


def report(root: Path, args: argparse.Namespace) -> list[str]:
    head = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    lines = [
        f"# bench_startup: {time.strftime('%Y-%m-%d %H:%M')}  checkout {root}  "
        f"({head.stdout.strip()[:72] or 'no git'})",
        f"# python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        + (f"CPU seconds, median (min-max) of {args.runs} fresh processes" if args.runs else "no timings"),
    ]

    def row(label: str, values: list[float]) -> str:
        return f"  {label:<34} {median(values):6.3f}   ({min(values):.3f}-{max(values):.3f})"

    cli(root, 1, SMALL)  # warm-up: bytecode caches written, files in the page cache
    if args.runs:
        bare = bare_python(args.runs, root)
        st = stages(root, args.runs)
        lines.append("stages of a 10-request run in one process:")
        lines.append(row("bare interpreter (python -S)", bare))
        for name in STAGES:
            lines.append(row(name, st[name]))
        lines.append(row("the stages' whole process (rusage)", st["stages process"]))
        lines.append("whole CLI process:")
        lines.append(row("python -m distsim " + " ".join(SMALL), cli(root, args.runs, SMALL)))
    if args.standard:
        sys.path.insert(0, str(HERE))
        from bench import overrides

        std = cli(root, args.standard, overrides(50_000))
        lines.append(row(f"standard benchmark (50,000 req), n={args.standard}", std))
    if args.importtime:
        lines += importtime(root, args.importtime)
    if args.callgrind:
        lines += callgrind_rows(root, args.callgrind_bench)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--standard", type=int, default=0, metavar="N", help="also run the standard benchmark N times")
    ap.add_argument("--importtime", type=int, default=12, metavar="K", help="list the K costliest packages (0: no)")
    ap.add_argument("--callgrind", action="store_true", help="also count instructions (valgrind; slow)")
    ap.add_argument("--callgrind-bench", type=int, default=5000, metavar="N",
                    help="with --callgrind: also the standard benchmark's CLI with N requests (0: no)")
    ap.add_argument("--record", action="store_true", help="append the output to scripts/results/bench_startup.txt")
    args = ap.parse_args()
    lines = report(args.root.resolve(), args)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.record:
        out = HERE / "results" / "bench_startup.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
