"""Queued-token admission, tier-aware: reject a request while the prompt tokens queued cluster-wide (waiting
to prefill, as reported) plus its own would exceed ``max_queued_tokens``; a request whose SLO class has at
least ``protected_priority`` is always admitted. Sheds the work that would wait, not a request count (one
long prompt weighs as many short ones), and sheds the lower tiers first."""

from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ADMISSIONS, Admission, PolicyParams


@dataclass(frozen=True)
class TokenLimitParams(PolicyParams):
    max_queued_tokens: int | None = None  # reject above this many prompt tokens queued cluster-wide (required)
    protected_priority: int | None = None  # requests of at least this priority are never rejected; null: none

    def check(self, key: str) -> None:
        limit = self.max_queued_tokens
        if limit is None or isinstance(limit, bool) or limit < 0:
            raise ConfigError(f"{key}.max_queued_tokens", f"token_limit needs an integer >= 0 (got {limit!r})")


@ADMISSIONS.register("token_limit")
class TokenLimit(Admission):
    Params = TokenLimitParams
    reads_signals = True

    def __init__(self, params: TokenLimitParams, ctx):
        super().__init__(params, ctx)
        self.limit = int(params.max_queued_tokens)
        self.protected = params.protected_priority

    def admit(self, req, now, view) -> bool:
        if self.protected is not None and req.priority >= self.protected:
            return True
        return int(view.queued_tokens().sum()) + req.prompt_tokens <= self.limit
