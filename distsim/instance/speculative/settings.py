"""``cluster.engine.speculative`` checked into :class:`SpeculativeSettings` (a bad value: one line naming the key).

The defaults a method brings, and where each figure comes from (docs/guide/speculative.md cites them in full):

- ``num_speculative_tokens``: vLLM has no default; null takes the value of vLLM's documented example for the
  method: 3 for EAGLE (docs.vllm.ai, Speculative Decoding, EAGLE), 1 for MTP (the DeepSeek-V3 Technical
  Report's MTP depth D = 1), 5 for a draft model and for n-gram (the same page's draft-model and n-gram
  examples).
- the acceptance rate per drafted position: 0.8 for EAGLE (EAGLE, Li et al., ICML 2024: its drafts are
  accepted about 80% of the time, Medusa's heads about 60%); 0.85 for MTP (DeepSeek-V3 Technical Report:
  "the acceptance rate of the second token prediction ranges between 85% and 90%", the low end). A draft
  model's and n-gram matching's rates depend on the pair and on the text (Leviathan et al., 2023, measure
  about 0.5 to 0.9 over their pairs and tasks): those methods need a rate given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from distsim.errors import ConfigError
from distsim.instance.latency.base import LatencyContext
from distsim.instance.speculative.acceptance import Acceptance
from distsim.instance.speculative.draft import DraftCost

METHODS = ("none", "draft_model", "eagle", "mtp", "ngram")
DEFAULT_K = {"draft_model": 5, "eagle": 3, "mtp": 1, "ngram": 5}
DEFAULT_RATE = {"eagle": 0.8, "mtp": 0.85}
MAX_K = 32  # far beyond any published draft length (EAGLE-3 drafts up to 8 deep)
HOST_TERMS = ("step_overhead_us", "sequence_overhead_us")  # the engine step pays its host work once


@dataclass(frozen=True)
class SpeculativeSettings:
    """A speculating engine's method, draft length, acceptance model and draft cost."""

    method: str
    k: int  # drafted tokens per sequence per step (vLLM's num_speculative_tokens)
    acceptance: Acceptance
    draft: DraftCost


def resolve_speculative(
    node: Any, key: str, latency_cfg: Any, ctx: LatencyContext, model_name: str
) -> SpeculativeSettings | None:
    """The settings of a ``cluster.engine.speculative`` node (None when the method is none); ``ctx`` is the
    target's latency context and ``latency_cfg`` its ``cluster.latency`` node (the draft is priced alike)."""
    if node is None:
        return None
    method = node.get("method") or "none"
    if method not in METHODS:
        raise ConfigError(f"{key}.method", f"must be one of {', '.join(METHODS)} (got {method!r})")
    if method == "none":
        return None
    k = node.get("num_speculative_tokens")
    k = DEFAULT_K[method] if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ConfigError(f"{key}.num_speculative_tokens", f"must be an integer from 1 to {MAX_K} (got {k!r})")
    acceptance = _acceptance(node, key, method, k)
    return SpeculativeSettings(method, k, acceptance, _draft(node, key, method, latency_cfg, ctx, model_name))


def _rate(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(key, f"must be a probability in [0, 1] (got {value!r})")
    return float(value)


def _acceptance(node: Any, key: str, method: str, k: int) -> Acceptance:
    rate, profile = node.get("acceptance_rate"), node.get("acceptance_profile")
    if rate is not None and profile is not None:
        raise ConfigError(f"{key}.acceptance_profile", "give acceptance_rate or acceptance_profile, not both")
    if profile is not None:
        values = OmegaConf.to_container(profile) if OmegaConf.is_config(profile) else list(profile)
        if len(values) != k:
            raise ConfigError(
                f"{key}.acceptance_profile", f"needs one rate per drafted position: {k} (got {len(values)})"
            )
        return Acceptance(tuple(_rate(v, f"{key}.acceptance_profile[{i}]") for i, v in enumerate(values)))
    if rate is None:
        if method not in DEFAULT_RATE:
            raise ConfigError(
                f"{key}.acceptance_rate", f"method {method} has no published default (it depends on the draft and"
                " the text): give acceptance_rate or acceptance_profile"
            )
        rate = DEFAULT_RATE[method]
    return Acceptance((_rate(rate, f"{key}.acceptance_rate"),) * k)


def _draft(node: Any, key: str, method: str, latency_cfg: Any, ctx: LatencyContext, model_name: str) -> DraftCost:
    """The draft's pricing: a fixed time per pass when head_cost_us is set, else a step model of the draft
    (method draft_model: the catalog model named; eagle, mtp: a one-layer head of the target), none for n-gram."""
    from dataclasses import replace

    from distsim.catalog.models import load_head_model, load_model
    from distsim.instance.latency.build import build_latency_model

    draft_name, head_us = node.get("draft_model"), node.get("head_cost_us")
    if draft_name is not None and method != "draft_model":
        raise ConfigError(f"{key}.draft_model", f"is read by method draft_model only (method is {method})")
    if head_us is not None:
        if isinstance(head_us, bool) or not isinstance(head_us, (int, float)) or head_us < 0:
            raise ConfigError(f"{key}.head_cost_us", f"must be a time >= 0 in microseconds (got {head_us!r})")
        return DraftCost(None, float(head_us), "head_cost_us")
    if method == "ngram":
        return DraftCost(None, 0.0, "host (n-gram)")
    if method == "draft_model":
        if draft_name is None:
            raise ConfigError(f"{key}.draft_model", "method draft_model needs a catalog model (or head_cost_us)")
        draft = load_model(draft_name, f"{key}.draft_model")
    else:
        draft = load_head_model(model_name)
    if latency_cfg.kind == "linear":
        raise ConfigError(
            f"{key}.head_cost_us", f"the linear latency model cannot price a {method} draft (it has no architecture):"
            " give head_cost_us"
        )
    cfg = OmegaConf.merge(latency_cfg, {name: 0.0 for name in HOST_TERMS})
    model = build_latency_model(cfg, replace(ctx, model=draft), f"{key}.draft_model")
    return DraftCost(model, 0.0, draft.name)
