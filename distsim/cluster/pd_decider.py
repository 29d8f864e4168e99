"""The P/D decider: which requests a prefill/decode fleet disaggregates (``policy.pd_decider``).

llm-d's pd-profile-handler and vLLM's disaggregated prefill both prefill a short prompt on the decode
instance itself: moving its KV costs more than computing it there. The decode instance is routed first;
the prompt tokens its prefix cache lacks (the longest cached prefix, as the engine would match it, at most
all blocks but the one holding the last prompt token, which is always computed) are counted; at most
``threshold_tokens`` of them and the request prefills locally, with no KV transfer; more and it goes to a
prefill instance as every request does without a decider. Reading the decode instance's own cache is what
llm-d's precise prefix-cache tracking (the engines' KV events) sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.errors import ConfigError
from distsim.validators import integer

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.instance.instance import Instance
    from distsim.request import Request


@dataclass(frozen=True)
class PDDecider:
    """Prefill on the decode instance when at most ``threshold_tokens`` prompt tokens need computing."""

    threshold_tokens: int
    subtract_cached: bool = True

    def uncached_tokens(self, req: Request, decode: Instance) -> int:
        """The prompt tokens the decode instance would compute (all of them without ``subtract_cached``)."""
        if not self.subtract_cached or not req.block_hashes or not decode.caching:
            return req.prompt_tokens
        hits, _ = decode.kv.match_prefix(req.block_hashes, (req.prompt_tokens - 1) // decode.bs)
        return req.prompt_tokens - hits * decode.bs

    def local(self, req: Request, decode: Instance) -> bool:
        """Whether ``req`` prefills on ``decode`` (no KV transfer) rather than on a prefill instance."""
        return self.uncached_tokens(req, decode) <= self.threshold_tokens


def pd_decider(cfg: DictConfig, hedged: bool) -> PDDecider | None:
    """``policy.pd_decider.*``: None when off (threshold_tokens null)."""
    if cfg.threshold_tokens is None:
        return None
    key = "policy.pd_decider.threshold_tokens"
    if hedged:
        raise ConfigError(key, "cannot be combined with policy.hedge (a hedge's copy goes to the prefill pool)")
    return PDDecider(integer(key, cfg.threshold_tokens, low=0), bool(cfg.subtract_cached))
