"""Starting or joining Ray for a sweep.

``runner.address`` null starts a private local Ray (address "local": never attaches to a cluster that
happens to be running on the machine), without the dashboard and with usage stats off. "auto",
"host:port" or "ray://host:port" joins an existing cluster; then the distsim package is shipped to the
workers with ``runtime_env.py_modules`` unless the driver already runs with a working_dir (as under
``ray job submit --working-dir``), where the workers already have it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import distsim

LOCAL = "local"


JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for a submitted job's driver


@dataclass
class RaySession:
    address: str
    owned: bool  # started (or joined) by us: shut down at the end
    cpus: int
    nodes: int
    shipped_package: bool = False

    def shutdown(self) -> None:
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()


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


def connect(address: str | None, ship_package: bool | None = None) -> RaySession:
    """Start a local Ray or join ``address``; reuse a Ray this process already initialised."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    owned = False
    shipped = False
    if not ray.is_initialized():
        owned = True
        common = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": True}
        env = runtime_env_for(address, ship_package)
        shipped = env is not None
        if address in (None, "", LOCAL):
            ray.init(address=LOCAL, include_dashboard=False, runtime_env=env, **common)
        else:
            ray.init(address=address, runtime_env=env, **common)
    resources = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return RaySession(address or LOCAL, owned, int(resources.get("CPU", 1)), nodes, shipped)
