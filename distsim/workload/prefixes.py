"""Shared system prompts (prefix groups) with Zipf popularity.

A share of requests is prepended one of ``groups`` system prompts; group g is picked with probability
proportional to (g + 1) ** -zipf_s. Such a request's block keys are the group's keys for the full blocks
of the system prompt, then unique keys, so prefix caches and prefix-aware routers see the sharing.
"""

from __future__ import annotations

import numpy as np

from distsim.errors import ConfigError
from distsim.workload import checks
from distsim.workload.keys import UniqueKeys, group_keys
from distsim.workload.tenants import zipf_shares


class PrefixGroups:
    def __init__(self, cfg, key: str, block_size: int):
        self.groups = checks.integer(f"{key}.groups", cfg.groups, low=0)
        self.share = checks.fraction(f"{key}.share", cfg.share)
        if self.groups == 0:
            if self.share > 0.0:
                raise ConfigError(f"{key}.groups", f"must be >= 1 when prefix.share > 0 (got {cfg.groups})")
            self.lengths = np.zeros(0, dtype=np.int64)
        elif cfg.group_tokens is not None:
            values = list(cfg.group_tokens)
            if len(values) != self.groups:
                raise ConfigError(
                    f"{key}.group_tokens", f"needs {self.groups} values (one per group), got {len(values)}"
                )
            self.lengths = np.asarray(
                [checks.integer(f"{key}.group_tokens[{i}]", v, low=1) for i, v in enumerate(values)],
                dtype=np.int64,
            )
        else:
            tokens = checks.integer(f"{key}.tokens", cfg.tokens, low=1)
            self.lengths = np.full(self.groups, tokens, dtype=np.int64)
        self.p = (
            zipf_shares(self.groups, checks.non_negative(f"{key}.zipf_s", cfg.zipf_s))
            if self.groups
            else None
        )
        self.block_size = block_size
        self.keys = [group_keys(g, int(L) // block_size) for g, L in enumerate(self.lengths)]

    @property
    def active(self) -> bool:
        """Whether synthetic requests use groups at all."""
        return self.groups > 0 and self.share > 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The group of each of ``n`` requests, -1 for none."""
        uses = rng.random(n) < self.share
        g = rng.choice(self.groups, size=n, p=self.p)
        return np.where(uses, g, -1)

    def block_keys(self, group: int, prompt_tokens: int, unique: UniqueKeys) -> tuple:
        """Keys for a prompt that starts with group ``group``'s system prompt (possibly cut short)."""
        gk = self.keys[group]
        n = prompt_tokens // self.block_size
        if n <= len(gk):
            return gk[:n]
        return gk + unique.take(n - len(gk))
