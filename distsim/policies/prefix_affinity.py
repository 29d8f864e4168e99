"""Prefix affinity: the instance holding the longest prefix of the request's prompt, per the router's
own prefix index; among equal matches the least loaded. A load guard keeps it from herding: when the
best-matching instance has more than ``load_guard`` outstanding requests above the least loaded, the
request goes to the least loaded instead, which then becomes warm for that prefix too."""

from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_min
from distsim.policies.session_affinity import LoadGuardParams


@dataclass(frozen=True)
class PrefixParams(LoadGuardParams):
    prefix_index_blocks: int | None = None  # router-side prefix index per instance (LRU); None: its KV blocks

    def check(self, key: str) -> None:
        super().check(key)
        if self.prefix_index_blocks is not None and self.prefix_index_blocks < 1:
            raise ConfigError(f"{key}.prefix_index_blocks", f"must be >= 1 or null (got {self.prefix_index_blocks})")


@ROUTERS.register("prefix_affinity")
class PrefixAffinity(Router):
    Params = PrefixParams
    uses_prefix_index = True

    def __init__(self, params: PrefixParams, ctx):
        super().__init__(params, ctx)
        self.guard = float(params.load_guard)

    def route(self, req, view) -> int:
        outstanding = view.outstanding()
        least = pick_min(outstanding, self.ctx.rng)
        if not req.block_hashes:
            return least
        match = view.prefix_match(req)
        self.last_scores = match / len(req.block_hashes)
        best = match[match.argmax()]  # max(), cheaper
        if best == 0:
            return least
        warm = (match == best).nonzero()[0]
        choice = int(warm[pick_min(outstanding[warm], self.ctx.rng)])
        if outstanding[choice] > outstanding[least] + self.guard:
            return least
        return choice
