"""Starting or joining Ray for a sweep.

``runner.address`` null starts a private local Ray (address "local": never attaches to a cluster that
happens to be running on the machine) on 127.0.0.1 only, without the dashboard, the token warning or
usage stats, and with a guard that stops its processes when the driver dies (distsim.runner.local_ray). "auto",
"host:port" or "ray://host:port" joins an existing cluster; then the distsim package is shipped to the
workers with ``runtime_env.py_modules`` unless the driver already runs with a working_dir (as under
``ray job submit --working-dir``), where the workers already have it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import distsim
from distsim.errors import ConfigError, os_reason
from distsim.runner import local_ray, startup

LOCAL = "local"
PROBE_TIMEOUT_S = 3.0


JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's driver


@dataclass
class RaySession:
    address: str
    owned: bool  # started (or joined) by us: shut down at the end
    cpus: int
    nodes: int
    shipped_package: bool = False
    local: local_ray.LocalRay | None = None  # the local Ray we started

    def shutdown(self) -> None:
        import ray

        if self.local is not None:
            self.local.stop()
            self.local = None
        elif self.owned and ray.is_initialized():
            ray.shutdown()

    def abandon(self) -> None:
        """Leave Ray without waiting for it (Ctrl-C), then :func:`exit_now`: a local Ray's guard kills its
        processes and in-flight jobs; a joined cluster drops this driver's jobs when the driver is gone."""
        if self.local is not None:
            self.local.abandon()
            self.local = None


def exit_now(status: int) -> NoReturn:
    """Exit at once with ``status`` after :meth:`RaySession.abandon`: output and log files flushed, but no
    exit handlers (Ray's would shut down a Ray whose processes are being killed: seconds, or a crash)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(status)


def _package_dir() -> str:
    return str(Path(distsim.__file__).resolve().parent)


def _inside_job_with_code() -> bool:
    """True in the driver of a job submitted with a working_dir or py_modules: workers get the code."""
    try:
        env = json.loads(os.environ.get(JOB_CONFIG_ENV, "{}")).get("runtime_env") or {}
    except ValueError:
        return False
    return bool(env.get("working_dir") or env.get("py_modules"))


def runtime_env_for(address: str | None, ship_package: bool | None) -> dict[str, Any] | None:
    """The job-level runtime env: distsim itself as py_modules when joining a cluster that lacks it."""
    remote = address not in (None, "", LOCAL)
    ship = ship_package if ship_package is not None else remote and not _inside_job_with_code()
    if not ship:
        return None
    return {"py_modules": [_package_dir()], "excludes": ["**/__pycache__"]}


def _host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of "HOST:PORT" or "ray://HOST:PORT"; None for other forms ("auto")."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or "/" in target:
        return None
    if not port.isdigit():
        raise ConfigError("runner.address", f"{address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    return host.strip("[]"), int(port)


def probe(address: str | None) -> None:
    """Fail in a moment, naming runner.address, when nothing listens at its HOST:PORT.

    Why: ray.init retries an unreachable address for about 20 s, logging every try, and then raises a
    ConnectionError traceback. A TCP connect says the same in milliseconds (or PROBE_TIMEOUT_S)."""
    if address in (None, "", LOCAL):
        return
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise ConfigError(
            "runner.address",
            f"nothing answers at {target[0]}:{target[1]} ({os_reason(err)}); "
            "start the cluster (ray start --head) or fix the address",
        ) from None


def ray_initialised() -> bool:
    """Whether this process already runs or joined a Ray, without importing ray (local_ray sets the
    environment Ray reads at import first)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _join(address: str, env: dict[str, Any] | None, start_timeout_s: float) -> None:
    probe(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    def join() -> None:
        try:
            ray.init(
                address=address, runtime_env=env, log_to_driver=False, logging_level=logging.WARNING,
                configure_logging=True,
            )  # fmt: skip
        except (ConnectionError, TimeoutError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError("runner.address", f"cannot join {address!r}: {first}") from None

    startup.with_one_retry(join, start_timeout_s, ray.shutdown)


def connect(
    address: str | None, ship_package: bool | None = None, *, num_cpus: int | None = None,
    start_timeout_s: float = local_ray.START_TIMEOUT_S,
) -> RaySession:
    """Start a local Ray (``num_cpus``: default all) or join ``address``; reuse a Ray this process
    already initialised.

    Raises ConfigError (runner.address) when the cluster cannot be reached, RayStartError when Ray does
    not start within ``start_timeout_s`` twice (distsim.runner.startup)."""
    owned = False
    shipped = False
    local = None
    if not ray_initialised():
        owned = True
        env = runtime_env_for(address, ship_package)
        shipped = env is not None
        if address in (None, "", LOCAL):
            local = local_ray.start(num_cpus, env, start_timeout_s)
        else:
            _join(address, env, start_timeout_s)
    import ray

    resources = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return RaySession(address or LOCAL, owned, int(resources.get("CPU", 1)), nodes, shipped, local)
