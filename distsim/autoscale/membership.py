"""Which instances the routers may pick while pools scale: every instance of a fixed pool, and the serving
replicas of an autoscaled one. Under P/D each role's view follows its own pools. When a view's members
change, its policies hear of it (``members_changed``), since candidate positions shift."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from distsim.autoscale.host import ScaledCluster


class Membership:
    def __init__(self, cluster: ScaledCluster):
        roles = np.array([inst.role for inst in cluster.instances])
        if cluster.disaggregated:
            self.groups = [
                (cluster.entry_view, (cluster.router, cluster.admission), roles == "prefill"),
                (cluster.decode_view, (cluster.decode_router,), roles == "decode"),
            ]
        else:
            self.groups = [(cluster.entry_view, (cluster.router, cluster.admission), np.ones(roles.size, dtype=bool))]

    def update(self, serving: np.ndarray) -> None:
        """Make the instances marked in ``serving`` (a mask over the cluster's instances) the candidates."""
        for view, policies, mine in self.groups:
            new = np.flatnonzero(serving & mine)
            old = view.members
            if new.size == old.size and np.array_equal(new, old):
                continue
            view.set_members(new)
            for policy in policies:
                policy.members_changed(old, new)
