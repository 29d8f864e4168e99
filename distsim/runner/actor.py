"""The Ray actor: a long-lived worker process that runs one whole simulation per call.

The actor keeps each configuration's composed config (pickled bytes, fetched once from the object store
per configuration) and hands every job a fresh copy; all job state lives inside ``execute``.
"""

from __future__ import annotations

import os
from typing import Any

from distsim.runner.job import execute
from distsim.runner.plan import Job


class SimWorker:
    def __init__(self, cwd: str | None, env: dict[str, str]):
        os.environ.update(env)
        if cwd and os.path.isdir(cwd):  # relative paths in configs (traces) resolve as in the driver
            os.chdir(cwd)
        self._configs: dict[str, bytes] = {}

    def run(self, job: Job, sweep_dir: str, config_ref: list[Any]) -> dict[str, Any]:
        """``config_ref`` wraps the ObjectRef in a list so Ray passes the reference, not the value."""
        import ray

        ref = config_ref[0]
        key = ref.hex()
        if key not in self._configs:
            self._configs[key] = ray.get(ref)
        node = ray.get_runtime_context().get_node_id()
        return execute(job, self._configs[key], sweep_dir, {"run.node_id": node})


def remote_worker_class() -> Any:
    """SimWorker as a Ray actor class (built lazily so importing this module does not import ray)."""
    import ray

    return ray.remote(max_restarts=0, max_task_retries=0)(SimWorker)
