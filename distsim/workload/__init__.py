"""Workloads: synthetic traffic and replay of real traces, as a stream of requests.

``build_workload(cfg, seed=..., block_size=...)`` validates the ``workload`` config and returns a source
to iterate; see :mod:`distsim.workload.source`.
"""

from distsim.workload.source import WorkloadSource, build_workload

__all__ = ["WorkloadSource", "build_workload"]
