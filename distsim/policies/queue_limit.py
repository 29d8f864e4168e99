"""Queue-limit admission: reject while the cluster's queued requests (waiting in instance queues,
as reported, plus in transit) reach ``max_queued_requests``. Load shedding: bounded queueing delay
for the admitted at the price of rejections."""

from distsim.errors import ConfigError
from distsim.policies.base import ADMISSIONS, Admission


@ADMISSIONS.register("queue_limit")
class QueueLimit(Admission):
    reads_signals = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        limit = getattr(cfg, "max_queued_requests", None)
        if limit is None or limit < 0:
            raise ConfigError("policy.admission.max_queued_requests", f"queue_limit needs an integer >= 0 (got {limit!r})")
        self.limit = int(limit)

    def admit(self, req, now, view) -> bool:
        return int(view.queue_depth().sum() + view.in_transit().sum()) < self.limit
