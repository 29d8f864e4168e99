"""Token-bucket admission: a bucket of ``capacity_tokens`` refilled at ``refill_tokens_per_s``; a
request costs its input tokens and is rejected when the bucket holds fewer. Caps the sustained
prompt-token rate while letting bursts up to the capacity through."""

import math

from distsim.errors import ConfigError
from distsim.policies.base import ADMISSIONS, Admission


def _positive(cfg, key):
    value = getattr(cfg, key, None)
    if value is None or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"policy.admission.{key}", f"token_bucket needs a number > 0 (got {value!r})")
    return float(value)


@ADMISSIONS.register("token_bucket")
class TokenBucket(Admission):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.capacity = _positive(cfg, "capacity_tokens")
        self.rate_per_us = _positive(cfg, "refill_tokens_per_s") / 1e6
        self.tokens = self.capacity
        self.last_us = 0

    def admit(self, req, now, view) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.last_us) * self.rate_per_us)
        self.last_us = now
        if self.tokens >= req.prompt_tokens:
            self.tokens -= req.prompt_tokens
            return True
        return False
