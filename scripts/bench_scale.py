"""Scale benchmarks: large fleets, every policy, and routing cost inside real runs.

Every case runs in a fresh child process (so peak memory is its own) on one scenario: the
`large` cluster (H100, Llama-3.1-70B at TP4) with `cluster.instances` set, the default workload
(ShareGPT-like lengths, shared system prompts) at 10 requests per second per instance (the headline also
at 2, closer to how fleets are sized, where a decision's fixed costs weigh more), fresh signals.
The child times the whole process (imports, compose, workload, simulation; outputs are not written)
and, by wrapping every registered router's ``route``, the CPU time spent deciding inside the run, and
by wrapping the router's prefix index, the CPU seconds of its ``record`` and ``match`` calls (record+match).

    python scripts/bench_scale.py headline                 # 1,000 instances, 1,000,000 requests: round_robin vs weighted, 10,000 and 2,000 req/s
    python scripts/bench_scale.py headline --rates 2       # only the 2,000 req/s row
    python scripts/bench_scale.py policies                 # every conf/policy at 1,000 instances, 100,000 requests
    python scripts/bench_scale.py policies --only weighted # round_robin and the policies named (--rates 10,2: both loads)
    python scripts/bench_scale.py decisions                # us per routing decision by policy and fleet size
    python scripts/bench_scale.py all --record             # all three, appended to scripts/results/bench_scale.txt
    python scripts/bench_scale.py memory                   # bytes per instance, request, cached block; RSS by phase
    python scripts/bench_scale.py headline --cli           # each case also through python -m distsim, as users run it

CPU seconds are user + system time of the child, measured with getrusage; they vary with the machine's
load, so each table states the date and whether other work shared the machine (``--note``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "scripts" / "results" / "bench_scale.txt"
DECISION_POLICIES = ("round_robin", "least_loaded", "prefix_affinity", "weighted")


def overrides(policy: str, instances: int, requests: int, per_instance: float = 10.0) -> list[str]:
    return [
        "cluster=large",
        f"cluster.instances={instances}",
        f"policy={policy}",
        "signals=fresh",
        f"workload.num_requests={requests}",
        f"workload.arrival.rate_rps={per_instance * instances}",
        "seed=0",
    ]


# ---------------------------------------------------------------------------------------- child
def _time_routers() -> dict[str, float]:
    """Wrap every registered router's ``route`` to add up its CPU time and calls (inside the real run)."""
    from distsim.policies.registry import ROUTERS

    ROUTERS.discover()
    acc = {"s": 0.0, "n": 0}
    clock = time.perf_counter  # single-threaded: wall time of a call is its CPU time, at a cheaper read
    for name in ROUTERS.names():
        cls = ROUTERS.get(name)
        if "route" not in cls.__dict__:
            continue
        original = cls.__dict__["route"]

        def timed(self, req, view, _original=original):
            t0 = clock()
            choice = _original(self, req, view)
            acc["s"] += clock() - t0
            acc["n"] += 1
            return choice

        cls.route = timed
    return acc


def _time_index() -> dict[str, float]:
    """Wrap the router's prefix index (``record`` on dispatch, ``match`` inside decisions) to add up the
    CPU time of each: what the index costs a prefix-aware run, apart from the rest of the machine's load."""
    from distsim.signals.prefix_index import PrefixIndex

    acc = {"record": 0.0, "match": 0.0}
    clock = time.process_time
    for name in acc:
        original = getattr(PrefixIndex, name)

        def timed(self, *args, _original=original, _name=name):
            t0 = clock()
            out = _original(self, *args)
            acc[_name] += clock() - t0
            return out

        setattr(PrefixIndex, name, timed)
    return acc


def child(spec: dict) -> dict:
    if "memory" in spec:
        import bench_memory

        return bench_memory.child(spec)
    acc = _time_routers() if spec.get("time_decisions") else None
    index = _time_index() if spec.get("time_decisions") else None
    from distsim import load_config, simulate

    t0 = time.process_time()
    cfg = load_config(spec["overrides"])
    result = simulate(cfg)
    sim_cpu = time.process_time() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "sim_cpu_s": round(sim_cpu, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "events": result.summary["sim"]["events"],
        "completed": result.summary["requests"]["completed"],
        "simulated_s": result.summary["sim"]["simulated_s"],
    }
    if acc is not None:
        out["decisions"] = acc["n"]
        out["route_cpu_s"] = round(acc["s"], 3)
        out["us_per_decision"] = round(acc["s"] / acc["n"] * 1e6, 1) if acc["n"] else None
        out["index_cpu_s"] = f"{index['record']:.1f}+{index['match']:.1f}"
    return out


def run_child(policy: str, instances: int, requests: int, time_decisions: bool = False, per_instance: float = 10.0) -> dict:
    spec = {"overrides": overrides(policy, instances, requests, per_instance), "time_decisions": time_decisions}
    return spawn(spec, policy, instances)


def run_cli(policy: str, instances: int, requests: int, per_instance: float = 10.0) -> dict:
    """The same case through ``python -m distsim`` as users run it (Hydra, outputs written but
    requests.parquet): the CPU seconds and peak memory of that process alone (``os.wait4``)."""
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "stderr", "w+") as err:
        argv = [sys.executable, "-m", "distsim", *overrides(policy, instances, requests, per_instance),
                "sim.write_requests=false", f"hydra.run.dir={tmp}/run"]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{policy} x {instances} through the CLI failed\n{err.read()[-2000:]}")
    return {"cli_cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "cli_peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def spawn(spec: dict, policy: str, instances: int) -> dict:
    """Run ``spec`` in a fresh child process (its own peak memory) and return what it prints last."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{policy} x {instances}: child failed\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------- tables
def policy_table(title: str, names: list[str], requests: int, per_instance: float = 10.0, cli: bool = False) -> list[str]:
    """Each policy at 1,000 instances, the first (round_robin) as the baseline of the same table; with
    ``cli``, each also through ``python -m distsim`` (its own CPU seconds, ratio and peak memory)."""
    lines = [title]
    lines.append(
        f"{'policy':<18}{'CPU-s':>9}{'sim CPU-s':>11}{'x round_robin':>15}{'us/decision':>13}"
        f"{'index rec+match':>17}{'peak MB':>10}"
        f"{'events':>12}{'completed':>11}"
        + (f"{'CLI CPU-s':>11}{'CLI x rr':>10}{'CLI peak MB':>13}" if cli else "")
    )
    base = cli_base = None
    for policy in names:
        r = run_child(policy, 1000, requests, time_decisions=True, per_instance=per_instance)
        base = base or r["process_cpu_s"]
        per = r["us_per_decision"]
        line = (
            f"{policy:<18}{r['process_cpu_s']:>9.1f}{r['sim_cpu_s']:>11.1f}{r['process_cpu_s'] / base:>15.2f}"
            f"{(f'{per:.1f}' if per is not None else '-'):>13}{r['index_cpu_s']:>17}{r['peak_rss_mb']:>10.0f}"
            f"{r['events']:>12,}"
            f"{r['completed']:>11,}"
        )
        if cli:
            c = run_cli(policy, 1000, requests, per_instance)
            cli_base = cli_base or c["cli_cpu_s"]
            line += f"{c['cli_cpu_s']:>11.1f}{c['cli_cpu_s'] / cli_base:>10.2f}{c['cli_peak_rss_mb']:>13.0f}"
        lines.append(line)
        print(lines[-1], flush=True)
    return lines


def headline(requests: int, rates: tuple[float, ...] = (10.0, 2.0), cli: bool = False) -> list[str]:
    """Round robin against weighted at each load (requests per second per instance)."""
    lines: list[str] = []
    for rate in rates:
        title = (f"1,000 instances, {requests:,} requests at {rate * 1000:,.0f} req/s, fresh signals"
                 " (whole process, outputs not written)")
        lines += policy_table(title, ["round_robin", "weighted"], requests, rate, cli)
    return lines


def policies(requests: int, only: str = "", rates: tuple[float, ...] = (10.0,), cli: bool = False) -> list[str]:
    names = sorted(p.stem for p in (ROOT / "conf" / "policy").glob("*.yaml") if p.stem != "round_robin")
    if only:
        names = [name for name in names if name in only.split(",")]
    which = "policies" if only else "every policy"
    lines: list[str] = []
    for rate in rates:
        title = f"{which}, 1,000 instances, {requests:,} requests at {rate * 1000:,.0f} req/s, fresh signals (whole process)"
        lines += policy_table(title, ["round_robin", *names], requests, rate, cli)
    return lines


def decisions(requests: int) -> list[str]:
    sizes = (10, 100, 1000)
    lines = [f"us per routing decision inside real runs ({requests:,} requests, 10 req/s per instance)"]
    lines.append(f"{'policy':<16}" + "".join(f"{f'N={n}':>10}" for n in sizes))
    for policy in DECISION_POLICIES:
        row = [run_child(policy, n, requests, time_decisions=True)["us_per_decision"] for n in sizes]
        lines.append(f"{policy:<16}" + "".join(f"{v:>10.1f}" for v in row))
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", choices=["headline", "policies", "decisions", "memory", "all"], default="all")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--headline-requests", type=int, default=1_000_000)
    ap.add_argument("--rates", default="10,2", help="headline and policies: requests per second per instance, comma-separated")
    ap.add_argument("--policy-requests", type=int, default=100_000)
    ap.add_argument("--decision-requests", type=int, default=20_000)
    ap.add_argument("--only", default="", help="policies: these (comma-separated) beside round_robin")
    ap.add_argument("--memory-requests", type=int, default=100_000, help="memory: requests of the headline case")
    ap.add_argument("--memory-cells", type=int, default=128, help="memory: cells of 1,024 instances in the cells case")
    ap.add_argument("--memory-cells-requests", type=int, default=100_000, help="memory: requests of the cells case")
    ap.add_argument("--cli", action="store_true",
                    help="headline and policies: also run each case through python -m distsim (CPU-s, peak MB)")
    ap.add_argument("--record", action="store_true", help="append the tables to scripts/results/bench_scale.txt")
    ap.add_argument("--note", default="", help="what else ran on the machine, for the record")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    rates = tuple(float(r) for r in args.rates.split(","))
    lines = [f"# {datetime.date.today()} {platform.machine()} python {platform.python_version()} {args.note}".rstrip()]
    if args.what in ("headline", "all"):
        lines += headline(args.headline_requests, rates, args.cli) + [""]
    if args.what in ("policies", "all"):
        lines += policies(args.policy_requests, args.only, rates, args.cli) + [""]
    if args.what in ("decisions", "all"):
        lines += decisions(args.decision_requests) + [""]
    if args.what == "memory":
        import bench_memory

        lines += bench_memory.tables(args.memory_requests, args.memory_cells, args.memory_cells_requests) + [""]
    text = "\n".join(lines)
    print(text)
    if args.record:
        with RESULTS.open("a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
