"""Session affinity: every turn of a session goes to the instance that served its first turn, where
its conversation is cached, unless that instance has ``load_guard`` more outstanding requests than
the least loaded; then the session moves (and sticks) to the least loaded. Requests without a
session go to the least loaded. Load here is the router's own outstanding count, always current."""

from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, PolicyParams, Router, positions
from distsim.policies.choice import pick_min

DEFAULT_LOAD_GUARD = 8.0


@dataclass(frozen=True)
class LoadGuardParams(PolicyParams):
    load_guard: float = DEFAULT_LOAD_GUARD  # max outstanding requests above the least loaded instance

    def check(self, key: str) -> None:
        if not self.load_guard >= 0:
            raise ConfigError(f"{key}.load_guard", f"must be >= 0 (got {self.load_guard!r})")


@ROUTERS.register("session_affinity")
class SessionAffinity(Router):
    Params = LoadGuardParams

    def __init__(self, params: LoadGuardParams, ctx):
        super().__init__(params, ctx)
        self.guard = float(params.load_guard)
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

    def members_changed(self, old, new) -> None:
        """Sessions keep their home where it still serves; a session whose home left finds a new one."""
        super().members_changed(old, new)
        where = positions(old, new)
        self.home = {s: int(where[h]) for s, h in self.home.items() if where[h] >= 0}
