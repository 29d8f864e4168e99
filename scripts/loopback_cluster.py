"""A two-node Ray cluster on this machine, a sweep submitted to it, and a clean stop.

    python scripts/loopback_cluster.py                      # ray job submit (the jobs/README.md way)
    python scripts/loopback_cluster.py --mode direct        # runner.address=HOST:PORT from this machine
    python scripts/loopback_cluster.py -- policy=round_robin,random seed='range(4)'

Starts a head node (`ray start --head --block`, 1 CPU, dashboard for the Jobs API) and a second node
(`ray start --address ... --block`, 1 CPU and a `loopback_worker` resource) on 127.0.0.1 with free ports
of their own, waits until both are up, runs a small sweep against the cluster, prints which Ray node ran
each job, and stops both nodes by signalling the two `ray start` processes it started (never `ray stop`,
which would stop every Ray on the machine; if this script dies, even by SIGKILL, the kernel sends them
SIGTERM). Every Ray server of both nodes listens on 127.0.0.1 only: the head runs in Ray's
single-machine mode (distsim/runner/local_ray.py) and the second node's `ray start` keeps 127.0.0.1 as
given (JOIN_ON_LOOPBACK). Every process gets a fresh token for Ray's token authentication, so nothing
else can use the cluster while it runs. Exit status 0 when every job ran ok and both nodes took part.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SWEEP = [
    "policy=round_robin,random",
    "seed=range(2)",
    "workload=fixed",
    "workload.num_requests=200",
    "cluster.instances=2",
]
T0 = time.perf_counter()
_BESIDE = Path(sys.executable).with_name("ray")
RAY = str(_BESIDE) if _BESIDE.exists() else "ray"  # the CLI of the Ray this Python imports
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": 127.0.0.1 is the node IP (local_ray.py)
# `ray start` of the second node: Ray refuses a second node in single-machine mode and otherwise turns
# 127.0.0.1 (in --address and --node-ip-address) into the machine's interface address, where the head
# does not listen; this is the same CLI with that one conversion switched off.
JOIN_ON_LOOPBACK = (
    "import sys\n"
    "import ray._private.services as services\n"
    "services.resolve_ip_for_localhost = lambda host: host\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv[0] = 'ray'\n"
    "sys.exit(main())\n"
)


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:5.1f}s] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_when_we_die() -> None:
    """In the child, before exec: SIGTERM when this script dies, even by SIGKILL (Linux's parent-death
    signal); `ray start --block` then stops its node's processes, as on our own SIGTERM."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def start_node(args: list[str], env: dict[str, str], log: Path, cli: list[str]) -> subprocess.Popen:
    """`ray start ... --block` in the background (it stays in the foreground of its own process)."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            [*cli, "start", "--block", *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_stop_when_we_die,
        )  # fmt: skip


def wait_started(proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    """Until the node reports it started (or its `ray start` exits, which is a failure)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(
        f"ray start failed or timed out; see {log}:\n{log.read_text(errors='replace')[-2000:]}"
    )


def wait_port(port: int, timeout: float = 300) -> None:
    """Until the head's GCS accepts connections: a second node can join before the head is done."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def wait_for_nodes(address: str, n: int, env: dict[str, str], timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([RAY, "status", "--address", address], capture_output=True, text=True, env=env)
        active = out.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in out.stdout else ""
        if active.count("node_") >= n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the cluster did not reach {n} nodes in {timeout} s")


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to our `ray start --block` processes: each then stops its own node's processes."""
    for proc in reversed(procs):  # the worker node first, then the head
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_sweep(
    mode: str, overrides: list[str], sweep_dir: Path, gcs: str, dashboard: str, env: dict[str, str]
) -> int:
    if mode == "submit":
        cmd = [
            RAY, "job", "submit", "--address", dashboard,
            "--runtime-env", str(ROOT / "jobs" / "runtime_env.yaml"), "--working-dir", str(ROOT), "--",
            "python", "-m", "distsim", "-m", *overrides,  # the Jobs CLI quotes each argument itself
            "runner.address=auto", "runner.progress=false", f"hydra.sweep.dir={sweep_dir}",
        ]  # fmt: skip
    else:
        cmd = [
            sys.executable,
            "-m",
            "distsim",
            "-m",
            *overrides,
            f"runner.address={gcs}",
            f"hydra.sweep.dir={sweep_dir}",
        ]
    say("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def node_summary(sweep_dir: Path) -> tuple[int, int, int]:
    """(jobs, ok jobs, distinct Ray nodes that ran jobs), printing jobs per node."""
    import pandas as pd

    results = pd.read_parquet(sweep_dir / "results.parquet")
    nodes = results["run.node_id"].dropna()
    say(f"{len(results)} jobs, {int((results['status'] == 'ok').sum())} ok, on {nodes.nunique()} Ray nodes:")
    for node, count in nodes.value_counts().sort_index().items():
        jobs = results.loc[results["run.node_id"] == node, "job"].tolist()
        print(f"    node {node[:12]}...  {count} jobs  {jobs}")
    return len(results), int((results["status"] == "ok").sum()), int(nodes.nunique())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="two-node Ray cluster on loopback + a small sweep")
    parser.add_argument("--mode", choices=["submit", "direct"], default="submit")
    parser.add_argument("--sweep-dir", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="sweep overrides (default: a small policy x seed sweep)")
    args = parser.parse_args(argv)
    overrides = args.overrides or DEFAULT_SWEEP
    work = Path(tempfile.mkdtemp(prefix="distsim-lb-"))
    sweep_dir = (args.sweep_dir or work / "sweep").resolve()
    gcs_port, dash_port = free_port(), free_port()
    gcs, dashboard = f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dash_port}"
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),  # this cluster's own secret, in memory only
    }
    env.pop("RAY_ADDRESS", None)
    # Ray's single-machine mode (the head, `ray status`, the sweep's driver): 127.0.0.1 stays 127.0.0.1
    # instead of becoming the interface address, so every Ray server binds loopback
    env[SINGLE_MACHINE_ENV] = "0"
    procs: list[subprocess.Popen] = []
    ok = False
    try:
        say(f"head node: 127.0.0.1:{gcs_port}, 1 CPU, dashboard {dashboard}")
        head_log, worker_log = work / "head.log", work / "worker.log"
        head_args = [
            "--head", "--node-ip-address=127.0.0.1", f"--port={gcs_port}", "--num-cpus=1",
            f"--dashboard-agent-listen-port={free_port()}", f"--ray-client-server-port={free_port()}",
            f"--temp-dir={work / 'ray'}", "--disable-usage-stats",
        ]  # fmt: skip
        if args.mode == "submit":  # the Jobs API lives in the dashboard
            head_args += [
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dash_port}",
            ]
        else:
            head_args += ["--include-dashboard=false"]
        procs.append(start_node(head_args, env, head_log, [RAY]))
        wait_port(gcs_port)
        say("worker node: 1 CPU + resource loopback_worker")
        worker_args = [
            f"--address={gcs}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
            '--resources={"loopback_worker": 1}', f"--dashboard-agent-listen-port={free_port()}",
            "--disable-usage-stats",
        ]  # fmt: skip
        worker_env = {k: v for k, v in env.items() if k != SINGLE_MACHINE_ENV}
        procs.append(start_node(worker_args, worker_env, worker_log, [sys.executable, "-c", JOIN_ON_LOOPBACK]))
        wait_started(procs[0], head_log)
        wait_started(procs[1], worker_log)
        wait_for_nodes(gcs, 2, env)
        say("cluster up: 2 nodes, 2 CPUs")
        code = run_sweep(args.mode, overrides, sweep_dir, gcs, dashboard, env)
        say(f"sweep exited with status {code}")
        if code == 0 and (sweep_dir / "results.parquet").exists():
            n, n_ok, nodes = node_summary(sweep_dir)
            meta = json.loads((sweep_dir / "sweep.json").read_text())
            say(f"sweep.json: workers={meta['workers']} address={meta['address']} wall_s={meta['wall_s']}")
            ok = n_ok == n and nodes == 2
    finally:
        say("stopping the two nodes (SIGTERM to our ray start processes)")
        stop(procs)
        say("stopped")
        if ok:  # keep the sweep, drop Ray's session files and the node logs
            shutil.rmtree(work / "ray", ignore_errors=True)
            for log in ("head.log", "worker.log"):
                (work / log).unlink(missing_ok=True)
            if args.sweep_dir is not None:
                shutil.rmtree(work, ignore_errors=True)
            say(f"sweep kept in {sweep_dir}")
        else:
            say(f"logs kept in {work}")
    say("OK: both nodes ran jobs" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
