"""The cluster: requests arrive, pass admission, are routed to an instance and enqueued there."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from distsim.engine.loop import PRIO_ARRIVAL, EventLoop
from distsim.engine.rng import stream
from distsim.instance.instance import Instance
from distsim.metrics.recorder import Recorder
from distsim.policies.base import ADMISSIONS, ROUTERS, PolicyContext, load_builtin_policies
from distsim.request import Request, Status


class Cluster:
    def __init__(self, pools: list, policy_cfg: Any, loop: EventLoop, recorder: Recorder, seed: int, *, fast_forward: bool = True):
        self.loop = loop
        self.recorder = recorder
        self.pools = pools
        self.instances: list[Instance] = []
        for pool in pools:
            for _ in range(pool.count):
                self.instances.append(
                    Instance(
                        len(self.instances),
                        pool.engine,
                        pool.latency,
                        loop,
                        recorder.done,
                        fast_forward=fast_forward,
                        pool=pool.name,
                        role=pool.role,
                        hardware=pool.hardware.name,
                        gpus=pool.tensor_parallel_size,
                    )
                )
        load_builtin_policies()
        n = len(self.instances)
        self.router = ROUTERS.get(policy_cfg.routing.kind)(policy_cfg.routing, PolicyContext(n, stream(seed, "router"), seed))
        self.admission = ADMISSIONS.get(policy_cfg.admission.kind)(
            policy_cfg.admission, PolicyContext(n, stream(seed, "admission"), seed)
        )
        self.view = self  # the read-only view routers see (richer signals arrive with the cluster layer)
        self.arrived = 0
        self.first_arrival_us: int | None = None
        self._source: Iterator[Request] | None = None

    @property
    def num_instances(self) -> int:
        return len(self.instances)

    def feed(self, requests: Iterable[Request]) -> None:
        """Stream requests in: one pending arrival event at a time, so memory does not grow with them."""
        self._source = iter(requests)
        self._pull()

    def _pull(self) -> None:
        req = next(self._source, None)
        if req is not None:
            self.loop.schedule(req.arrival_us, PRIO_ARRIVAL, self._on_arrival, req)

    def _on_arrival(self, now: int, req: Request) -> None:
        if self.first_arrival_us is None:
            self.first_arrival_us = now
        self.arrived += 1
        self._pull()
        if not self.admission.admit(req, now, self.view):
            req.status = Status.REJECTED
            self.recorder.done(req)
            return
        self.instances[self.router.route(req, self.view)].enqueue(req, now)

    def finish(self, horizon_us: int | None) -> None:
        """End of the run: settle fast-forwarded runs up to the horizon and record in-flight requests."""
        for inst in self.instances:
            if horizon_us is not None:
                inst.settle(horizon_us)
            for req in inst.in_flight():
                req.status = Status.UNFINISHED
                self.recorder.done(req)
