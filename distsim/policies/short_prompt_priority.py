"""Short prompt priority: least_loaded's choice of instance, sent with a priority: a prompt shorter than
the mean of the prompts this router has routed so far goes with priority 1, the rest with 0, so an engine
with ``cluster.engine.scheduler=priority`` admits the short ones first (their TTFT falls, the long ones
wait longer). A worked example of the policy interface (docs/guide/stateful_policies.md): state kept from
the policy's own decisions, a :class:`~distsim.policies.base.Route` with a priority, and figures of its own
in summary.json's ``policy.metrics``. It reads prompt lengths only (never output lengths)."""

from __future__ import annotations

from distsim.policies.base import ROUTERS, Route, Router
from distsim.policies.choice import load, pick_min

SHORT, LONG = 1, 0  # the priority scheduler serves the higher first


@ROUTERS.register("short_prompt_priority")
class ShortPromptPriority(Router):
    reads_signals = True

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.decisions = 0
        self.prompt_tokens = 0  # summed over every routed prompt: the running mean is this / decisions
        self.prioritised = 0

    def route(self, req, view) -> Route:
        loads = load(view)
        self.last_scores = -loads
        target = pick_min(loads, self.ctx.rng)
        tokens = req.prompt_tokens
        # short: below the mean of the prompts before it (the first prompt has no mean to compare with)
        short = self.decisions > 0 and tokens * self.decisions < self.prompt_tokens
        self.decisions += 1
        self.prompt_tokens += tokens
        if short:
            self.prioritised += 1
            return Route(target, SHORT)
        return Route(target, LONG)

    def metrics(self) -> dict[str, float]:
        mean = self.prompt_tokens / self.decisions if self.decisions else 0.0
        return {
            "decisions": self.decisions,
            "prioritised": self.prioritised,
            "mean_prompt_tokens": round(mean, 3),
        }
