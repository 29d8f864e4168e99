"""Typed, frozen settings: what the composed config means once it has been checked.

The composed config (Hydra's DictConfig) is read once, by :mod:`distsim.config.checks`, into these
values with units in their names (microseconds, bytes per second); builders take them and never read
raw config. Everything here is immutable, so a resolved :class:`distsim.config.scenario.Scenario` can
be shared, pickled to a Ray worker, and reused for many seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from distsim.config.timeline import TimelineWindow
from distsim.config.window import MeasureWindow

SIGNALS = ("queue_depth", "running", "kv_utilization", "cache_hit_rate", "queued_tokens")


@dataclass(frozen=True)
class SignalSettings:
    """How fresh instance-reported signals are: per signal (interval_us, jitter_us), 0 = read live;
    a scrape becomes visible ``transport_delay_us`` after it is taken."""

    cadence: dict[str, tuple[int, int]] = field(default_factory=lambda: {name: (0, 0) for name in SIGNALS})
    transport_delay_us: int = 0

    @property
    def live(self) -> bool:
        return self.transport_delay_us == 0 and all(interval == 0 for interval, _ in self.cadence.values())


@dataclass(frozen=True)
class TransferSettings:
    """The P/D KV link: time = latency_us + bytes / bandwidth (bytes of the prompt's KV per GPU)."""

    bandwidth_bytes_per_s: float = 50e9
    latency_us: float = 10.0


@dataclass(frozen=True)
class FrontendSettings:
    """Time a request spends outside the engine, as a client measures it: the server's ingestion (a fixed
    cost per request plus tokenisation per prompt token) before the engine queues the request, and the
    detokenisation and streaming of each output token after the engine emits it. The per-token lag is the
    same for every token, so TTFT and E2E grow by it and TPOT does not. All zero: the engine's own times."""

    request_us: float = 0.0
    per_input_token_us: float = 0.0
    per_output_token_us: float = 0.0

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
class PolicyChoice:
    """A routing or admission policy: its registered class, its checked parameters, and the time its
    decision adds before a request reaches an instance."""

    kind: str
    cls: Any  # the registered Router or Admission class
    params: Any  # an instance of cls.Params
    latency_us: int = 0


HEDGE_TARGETS = ("router", "least_outstanding", "random")


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
    routing: PolicyChoice
    admission: PolicyChoice
    trace_decisions: bool = False
    hedge: HedgeSettings = HedgeSettings()

    @property
    def dispatch_us(self) -> int:
        return self.admission.latency_us + self.routing.latency_us


@dataclass(frozen=True)
class FitnessSettings:
    """One number per run (distsim.metrics.fitness): ``kind`` goodput (``per`` gpu, dollar or none)
    or weighted (metric ``weights`` and reference values ``refs``)."""

    kind: str = "goodput"
    per: str = "gpu"
    weights: dict[str, float] = field(default_factory=dict)
    refs: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SimSettings:
    """Simulation controls that do not change the modelled system."""

    seed: int = 0
    horizon_us: int | None = None
    fast_forward: bool = True
    write_requests: bool = True
    window: MeasureWindow | None = None  # sim.warmup_s / measure_s; None: every request counts
    timeline: TimelineWindow | None = None  # sim.timeline and its window; None: no timeline.json


@dataclass(frozen=True)
class SloDefaults:
    """The workload's default SLOs (a request without its own class's SLO is held to these)."""

    ttft_ms: float = float("inf")
    tpot_ms: float = float("inf")


@dataclass(frozen=True)
class CellSettings:
    """The cell layer (distsim.cells): ``count`` cells (1: none), the front router's registered class,
    the cells' summary cadence (interval and jitter, 0: the front reads live counts) and transport delay,
    the Vivaldi-style coordinates' dimensions and scales with the per-message jitter, and spill-over
    (``spill_threshold`` outstanding requests per instance, None: off; at most ``max_hops`` per request)."""

    count: int = 1
    front_policy: str = "round_robin"
    front: Any = None  # the registered FrontRouter class
    summary_interval_us: int = 0
    summary_jitter_us: int = 0
    summary_delay_us: int = 0
    dims: int = 3
    spread_ms: float = 0.0
    height_ms: float = 0.0
    jitter_us: int = 0
    spill_threshold: float | None = None
    max_hops: int = 1

    @property
    def enabled(self) -> bool:
        return self.count > 1
