"""The cluster's config sections checked into typed, frozen settings (resolve, then build).

``cluster.kv_transfer.*`` (the P/D link),
``cluster.frontend.*`` (costs outside the engine) and ``policy.*`` (routing and admission, each a
distsim.policies.settings.PolicyChoice, hedging and the P/D decider). Values carry their units in their names
(microseconds, bytes per second); the cluster's builders take these and never read raw config. Checks that
need the resolved pools too are in distsim.cluster.checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.cluster.pd_decider import PDDecider, pd_decider
from distsim.errors import ConfigError
from distsim.policies.registry import ADMISSIONS, ROUTERS
from distsim.policies.settings import PolicyChoice, policy_choice
from distsim.validators import choice, integer, ms_to_us, non_negative, positive

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from distsim.policies.base import Admission, Router

HEDGE_TARGETS = ("router", "least_outstanding", "random")


@dataclass(frozen=True)
class TransferSettings:
    """The P/D KV link: time = latency_us + bytes / bandwidth (bytes of the prompt's KV per GPU, times
    ``compression``: the share of them that crosses the link, 1 uncompressed)."""

    bandwidth_bytes_per_s: float = 50e9
    latency_us: float = 10.0
    compression: float = 1.0


@dataclass(frozen=True)
class FrontendSettings:
    """Time a request spends outside the engine, as a client measures it: the server's ingestion (a fixed
    cost per request plus tokenisation per prompt token) before the engine queues the request, and the
    detokenisation and streaming of each output token after the engine emits it. The per-token lag is the
    same for every token, so TTFT and E2E grow by it and TPOT does not. All zero: the engine's own times.
    No defaults: ``cluster.frontend`` in the config schema holds them."""

    request_us: float
    per_input_token_us: float
    per_output_token_us: float

    @property
    def ingests(self) -> bool:
        return self.request_us > 0 or self.per_input_token_us > 0

    def ingest_us(self, prompt_tokens: int) -> int:
        """Microseconds from the request's arrival until the engine can queue it."""
        return math.floor(self.request_us + self.per_input_token_us * prompt_tokens + 0.5)

    @property
    def output_lag_us(self) -> int:
        return math.floor(self.per_output_token_us + 0.5)


@dataclass(frozen=True)
class HedgeSettings:
    """Hedged requests: after ``delay_us`` (or ``slo_fraction`` of the request's TTFT SLO) without a first
    token, another copy, up to ``max_copies`` in all, goes to an instance chosen by ``target``."""

    slo_fraction: float | None = None
    delay_us: int | None = None
    max_copies: int = 2
    target: str = "router"

    @property
    def enabled(self) -> bool:
        return self.slo_fraction is not None or self.delay_us is not None


@dataclass(frozen=True)
class PolicySettings:
    routing: PolicyChoice[Router]
    admission: PolicyChoice[Admission]
    trace_decisions: bool = False
    hedge: HedgeSettings = HedgeSettings()
    pd_decider: PDDecider | None = None  # P/D fleets: which requests prefill on their decode instance

    @property
    def dispatch_us(self) -> int:
        return self.admission.latency_us + self.routing.latency_us


def transfer(cfg: DictConfig) -> TransferSettings:
    """``cluster.kv_transfer.*`` (used under P/D disaggregation)."""
    bw = positive("cluster.kv_transfer.bandwidth_gbps", cfg.bandwidth_gbps)
    compression = positive("cluster.kv_transfer.compression", cfg.compression)
    if compression > 1.0:
        raise ConfigError("cluster.kv_transfer.compression", f"must be in (0, 1]: the share of the KV bytes sent (got {cfg.compression!r})")
    return TransferSettings(bw * 1e9, non_negative("cluster.kv_transfer.latency_us", cfg.latency_us), compression)


def frontend(cfg: DictConfig) -> FrontendSettings:
    """``cluster.frontend.*``: costs outside the engine, each >= 0."""
    return FrontendSettings(
        non_negative("cluster.frontend.request_us", cfg.request_us),
        non_negative("cluster.frontend.per_input_token_us", cfg.per_input_token_us),
        non_negative("cluster.frontend.per_output_token_us", cfg.per_output_token_us),
    )


def policy(cfg: DictConfig) -> PolicySettings:
    """``policy.*``: the routing and admission classes with their checked parameters."""
    routing = policy_choice(cfg.routing, "policy.routing", ROUTERS)
    admission = policy_choice(cfg.admission, "policy.admission", ADMISSIONS)
    hedging = hedge(cfg.hedge)
    decider = pd_decider(cfg.pd_decider, hedging.enabled)
    return PolicySettings(routing, admission, bool(cfg.trace_decisions), hedging, decider)


def hedge(cfg: DictConfig) -> HedgeSettings:
    """``policy.hedge.*``: one delay (a fraction of the TTFT SLO, or milliseconds), the copies, the target."""
    key = "policy.hedge"
    if cfg.delay_slo_fraction is not None and cfg.delay_ms is not None:
        raise ConfigError(f"{key}.delay_ms", "give delay_slo_fraction or delay_ms, not both")
    slo_fraction = None if cfg.delay_slo_fraction is None else positive(f"{key}.delay_slo_fraction", cfg.delay_slo_fraction)
    delay = None if cfg.delay_ms is None else ms_to_us(f"{key}.delay_ms", cfg.delay_ms)
    copies = integer(f"{key}.max_copies", cfg.max_copies, low=2)
    return HedgeSettings(slo_fraction, delay, copies, choice(f"{key}.target", cfg.target, HEDGE_TARGETS))
