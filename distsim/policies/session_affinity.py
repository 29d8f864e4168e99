"""Session affinity: every turn of a session goes to the instance that served its first turn, where
its conversation is cached, unless that instance has ``load_guard`` more outstanding requests than
the least loaded; then the session moves (and sticks) to the least loaded. Requests without a
session go to the least loaded. Load here is the router's own outstanding count, always current."""

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_min

DEFAULT_LOAD_GUARD = 8


def load_guard(cfg, default: float = DEFAULT_LOAD_GUARD) -> float:
    value = getattr(cfg, "load_guard", None)
    if value is None:
        return default
    if not value >= 0:
        raise ConfigError("policy.routing.load_guard", f"must be >= 0 (got {value!r})")
    return float(value)


@ROUTERS.register("session_affinity")
class SessionAffinity(Router):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.guard = load_guard(cfg)
        self.home: dict[int, int] = {}

    def route(self, req, view) -> int:
        outstanding = view.outstanding()
        least = pick_min(outstanding, self.ctx.rng)
        if req.session_id < 0:
            return least
        home = self.home.get(req.session_id)
        if home is None or outstanding[home] > outstanding[least] + self.guard:
            self.home[req.session_id] = least
            return least
        return home
