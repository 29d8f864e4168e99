"""Queue-limit admission: reject while the cluster's queued requests (waiting in instance queues,
as reported, plus in transit) reach ``max_queued_requests``. Load shedding: bounded queueing delay
for the admitted at the price of rejections."""

from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ADMISSIONS, Admission, PolicyParams


@dataclass(frozen=True)
class QueueLimitParams(PolicyParams):
    max_queued_requests: int | None = None  # reject above this many queued cluster-wide (required)

    def check(self, key: str) -> None:
        limit = self.max_queued_requests
        if limit is None or limit < 0:
            raise ConfigError(f"{key}.max_queued_requests", f"queue_limit needs an integer >= 0 (got {limit!r})")


@ADMISSIONS.register("queue_limit")
class QueueLimit(Admission):
    Params = QueueLimitParams
    reads_signals = True

    def __init__(self, params: QueueLimitParams, ctx):
        super().__init__(params, ctx)
        self.limit = int(params.max_queued_requests)

    def admit(self, req, now, view) -> bool:
        return int(view.queue_depth().sum() + view.in_transit().sum()) < self.limit
