"""Token-bucket admission: a bucket of ``capacity_tokens`` refilled at ``refill_tokens_per_s``; a
request costs its input tokens and is rejected when the bucket holds fewer. Caps the sustained
prompt-token rate while letting bursts up to the capacity through."""

import math
from dataclasses import dataclass

from distsim.errors import ConfigError
from distsim.policies.base import ADMISSIONS, Admission, PolicyParams


@dataclass(frozen=True)
class TokenBucketParams(PolicyParams):
    capacity_tokens: float | None = None  # bucket size in input tokens (required)
    refill_tokens_per_s: float | None = None  # refill rate (required)

    def check(self, key: str) -> None:
        for name in ("capacity_tokens", "refill_tokens_per_s"):
            value = getattr(self, name)
            if value is None or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{key}.{name}", f"token_bucket needs a number > 0 (got {value!r})")


@ADMISSIONS.register("token_bucket")
class TokenBucket(Admission):
    Params = TokenBucketParams

    def __init__(self, params: TokenBucketParams, ctx):
        super().__init__(params, ctx)
        self.capacity = float(params.capacity_tokens)
        self.rate_per_us = float(params.refill_tokens_per_s) / 1e6
        self.tokens = self.capacity
        self.last_us = 0

    def admit(self, req, now, view) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.last_us) * self.rate_per_us)
        self.last_us = now
        if self.tokens >= req.prompt_tokens:
            self.tokens -= req.prompt_tokens
            return True
        return False
