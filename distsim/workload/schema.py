"""Workload config schema: arrivals, lengths, tenants and SLO classes, prefixes, sessions, traces.

Every key exists in the composed config (null where the chosen kind does not use it), so users switch
kinds from the command line without Hydra's ``+``. Values are checked when the workload is built
(:func:`distsim.workload.build_workload`), which names the offending dotted key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distsim.lora.schema import LoraWorkloadConfig


@dataclass
class DistConfig:
    """A distribution: fixed | uniform | lognormal | exponential | normal | poisson | empirical.

    Used for token lengths (rounded to integers, at least 1), session turn counts and think times.
    ``min``/``max`` clamp every draw; for ``normal`` they truncate instead (out-of-range draws are redrawn).
    """

    dist: str = "fixed"  # fixed | uniform | lognormal | exponential | normal | poisson | empirical
    value: float | None = None  # fixed
    low: float | None = None  # uniform (integer lengths: inclusive bounds)
    high: float | None = None  # uniform
    mu: float | None = None  # lognormal (of the underlying normal)
    sigma: float | None = None  # lognormal
    mean: float | None = None  # exponential, normal, poisson
    std: float | None = None  # normal
    path: str | None = None  # empirical: a CSV file (relative: cwd, then the repository root)
    column: str | None = None  # empirical: which column (null: the file's only column)
    min: float | None = None  # clamps applied after drawing
    max: float | None = None  # clamp above



@dataclass
class ArrivalConfig:
    """The arrival process: poisson | gamma | mmpp | constant | schedule."""

    process: str = "poisson"  # poisson | gamma | mmpp | constant | schedule
    rate_rps: float | None = 10.0  # poisson, gamma, constant
    cv: float | None = None  # gamma: coefficient of variation of inter-arrival times
    rates_rps: list[float] | None = None  # mmpp: rate per state; schedule: rate per segment
    dwell_s: list[float] | None = None  # mmpp: mean dwell time per state (exponential)
    durations_s: list[float] | None = None  # schedule: length of each segment
    repeat: bool = True  # schedule: loop the segments (false: the last rate holds forever)


@dataclass
class PrefixConfig:
    """Shared system prompts: ``groups`` prompts of ``tokens`` tokens, used by a ``share`` of requests.

    A request that uses one gets the group's prompt prepended to its own drawn input tokens.
    """

    groups: int = 0  # distinct shared prompts (0: none)
    tokens: int = 0  # tokens of each shared prompt
    share: float = 0.0  # of requests that open with one
    zipf_s: float = 1.0  # popularity of group i is proportional to (i + 1) ** -zipf_s
    group_tokens: list[int] | None = None  # per-group lengths (overrides ``tokens``)


@dataclass
class SLOClassConfig:
    """An SLO class: a share of requests with their own objectives, priority and (optional) lengths."""

    name: str = "default"  # names the class in summary.json
    share: float = 1.0  # relative weight among classes
    ttft_ms: float | None = None  # null: workload.slo.ttft_ms
    tpot_ms: float | None = None  # null: workload.slo.tpot_ms
    priority: int | None = None  # null: workload.slo.priority; the priority scheduler serves higher first
    input_tokens: DistConfig | None = None  # null: workload.input_tokens
    output_tokens: DistConfig | None = None
    sheddable: bool = False  # its SLO allows shedding: a request of it that admission sheds is no miss for capacity


@dataclass
class SLOConfig:
    """Default latency objectives used for goodput (a request meets both to count), and SLO classes."""

    ttft_ms: float = 2000.0  # time to first token objective
    tpot_ms: float = 100.0  # time per output token objective
    priority: int = 0  # for cluster.engine.scheduler=priority
    classes: list[SLOClassConfig] | None = None  # null: one class named "default"


@dataclass
class TenantProfileConfig:
    """What sets one tenant apart; every field is optional and wins over its class's value."""

    slo_class: str | None = None  # all of this tenant's requests are in this class
    ttft_ms: float | None = None  # null: its class's
    tpot_ms: float | None = None  # null: its class's
    priority: int | None = None  # null: its class's
    input_tokens: DistConfig | None = None
    output_tokens: DistConfig | None = None


@dataclass
class TenantsConfig:
    """``count`` tenants with Zipf-skewed shares of the requests (or explicit ``shares``)."""

    count: int = 1  # tenants (1: no tenants)
    zipf_s: float = 1.0  # share of tenant i is proportional to (i + 1) ** -zipf_s
    shares: list[float] | None = None  # explicit relative shares, one per tenant
    profiles: list[TenantProfileConfig] | None = None  # profile i belongs to tenant i


@dataclass
class ToolCallConfig:
    """An agent's tool calls (``workload.sessions.tools``, closed-loop sessions only): after a turn, with
    probability ``share`` the model calls ``calls`` tools in parallel; the next turn goes out when the
    slowest returns, its new tokens the calls' results instead of a user's message, with no think time."""

    share: float = 0.0  # of turns (but a session's last) that end in tool calls (0: none)
    calls: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=1))  # parallel calls (fan-out)
    latency_s: DistConfig = field(default_factory=lambda: DistConfig(dist="exponential", mean=1.0))  # each call's
    result_tokens: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=200))  # each call's


@dataclass
class SessionConfig:
    """Multi-turn sessions: each turn's prompt holds the whole previous conversation plus new tokens.

    Open loop (the default), turn k+1 arrives a think time after turn k arrived (the workload does not see
    responses); ``closed_loop``, a think (or tool) time after turn k's reply reached the client, as a chat
    user or an agent does.
    """

    enabled: bool = False  # multi-turn sessions on
    turns: DistConfig = field(default_factory=lambda: DistConfig(dist="uniform", low=2, high=6))
    think_time_s: DistConfig = field(default_factory=lambda: DistConfig(dist="exponential", mean=10.0))
    max_context_tokens: int | None = None  # a session ends before a follow-up's prompt would exceed this
    closed_loop: bool = False  # each turn waits for the previous turn's reply (agentic and chat sessions)
    tools: ToolCallConfig = field(default_factory=ToolCallConfig)  # closed loop: tool calls between turns


@dataclass
class ClientStageConfig:
    """One stage of a closed-loop run: this many clients for this long (inference-perf's stages, a GuideLLM
    concurrency sweep)."""

    clients: int = 1  # concurrent clients during the stage
    duration_s: float = 60.0  # how long the stage lasts


@dataclass
class ClientsConfig:
    """Closed-loop clients: ``count`` users, each sending its next request when its previous reply is in
    (plus a think time), as ``vllm bench serve --max-concurrency``, GuideLLM's concurrent profile and
    inference-perf's concurrency stages do. Off while ``count`` and ``stages`` are both null."""

    count: int | None = None  # concurrent clients (null: open loop, unless stages are set)
    stages: list[ClientStageConfig] | None = None  # clients per stage, in order (instead of count)
    mode: str = "closed"  # closed: a free client sends at once | mixed: not before the request's own arrival time
    # a client's pause between a reply and its next request (the default: none)
    think_time_s: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=0.0))
    ramp_s: float = 0.0  # new clients start evenly spread over this many seconds (at the start, at each stage)


@dataclass
class RequestTypeConfig:
    """A non-LLM request type of ``workload.mix`` (distsim.workload.mix): how many batch items a request
    carries (images per request; audio windows), each item's size in the type's unit (image side in pixels;
    audio seconds), and its latency SLO (arrival to result). A batching runtime serves it (distsim.runtime)."""

    items: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=1))
    size: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=1.0))
    slo_ms: float | None = None  # null: no latency SLO (every completed request meets it)


@dataclass
class WorkloadConfig:
    kind: str = "synthetic"  # synthetic | trace
    # the workload's own seed: its streams derive from it instead of the master seed, so the requests stay the
    # same while the simulation's seed varies (BLIS's WorkloadSeed); null: the master seed, as every stream
    seed: int | None = None
    num_requests: int | None = 1000  # stop after this many requests (traces: null = the whole file)
    duration_s: float | None = None  # stop at this arrival time (both set: whichever comes first)
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    input_tokens: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=512))
    output_tokens: DistConfig = field(default_factory=lambda: DistConfig(dist="fixed", value=128))
    tenants: TenantsConfig = field(default_factory=TenantsConfig)
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    sessions: SessionConfig = field(default_factory=SessionConfig)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)
    # trace replay (kind=trace)
    format: str | None = None  # mooncake | azure | burstgpt | servegen | csv | parquet
    path: str | None = None  # relative: cwd, then the repository root
    time_scale: float = 1.0  # multiply inter-arrival times (0.5 = twice the rate)
    target_rate_rps: float | None = None  # rescale times to this mean rate (instead of time_scale)
    start_s: float | None = None  # window [start_s, end_s) in trace seconds after the first row
    end_s: float | None = None  # null: to the end of the trace
    max_rows: int | None = None  # read at most this many rows (after the window start)
    jitter_s: float | None = None  # add uniform [0, jitter_s) to each arrival (smooths ticked traces)
    # request types (distsim.workload.mix): shares by type name, e.g. {llm: 0.7, vision: 0.2, asr: 0.1};
    # null (the default): every request is an LLM request, and nothing changes. ``types``: what a non-LLM type
    # carries (RequestTypeConfig), over the built-in vision and asr (distsim.workload.mix.BUILTIN_TYPES): any
    # name, e.g. +workload.types.ocr={slo_ms: 500} or +workload.types.vision.slo_ms=100
    mix: Any = None
    types: Any = field(default_factory=dict)
    lora: LoraWorkloadConfig = field(default_factory=LoraWorkloadConfig)  # LoRA adapters per request (adapters 0: none)
