"""The request: what a workload emits and what flows through the cluster.

Workload fields are set by the source and never changed afterwards. Runtime fields belong to the
cluster and the instance that serves the request; only they write them, and the metrics read them.
Times are integer microseconds of simulated time; ``-1`` means "not yet". The instance's scratch
bookkeeping (phase, KV blocks, computed tokens) is no field here but one object on ``seq``, owned by
the serving instance (see :mod:`distsim.instance.sequence`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from enum import IntEnum


class Status(IntEnum):
    """A request's final status (exactly one per request)."""

    UNFINISHED = 0  # still queued or running when the simulation stopped (horizon)
    COMPLETED = 1
    REJECTED = 2  # refused by admission
    DROPPED = 3  # can never fit on the instance it was sent to (KV cache or token budget)


STATUS_NAMES = {s: s.name.lower() for s in Status}


class Request:
    """One inference request. ``__slots__`` keeps it small: a sweep holds millions of them."""

    __slots__ = (
        # workload fields
        "request_id",
        "arrival_us",
        "prompt_tokens",
        "output_tokens",
        "tenant",
        "slo_class",
        "session_id",
        "block_hashes",
        "ttft_slo_ms",
        "tpot_slo_ms",
        "priority",
        "adapter",
        # runtime fields (cluster and instance)
        "status",
        "instance",
        "prefill_instance",
        "route_us",
        "enqueue_us",
        "first_scheduled_us",
        "first_token_us",
        "completion_us",
        "last_token_us",
        "generated",
        "cached_tokens",
        "preemptions",
        # the serving instance's own bookkeeping
        "seq",
    )

    def __init__(
        self,
        request_id: int,
        arrival_us: int,
        prompt_tokens: int,
        output_tokens: int,
        tenant: int = 0,
        slo_class: str = "default",
        session_id: int = -1,
        block_hashes: Sequence[Hashable] | None = None,
        ttft_slo_ms: float | None = None,
        tpot_slo_ms: float | None = None,
        priority: int = 0,
    ):
        self.request_id = request_id
        self.arrival_us = arrival_us
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.tenant = tenant
        self.slo_class = slo_class
        self.session_id = session_id
        # One hashable key per *full* block of the prompt at the engine's block size; equal keys at
        # position k mean equal prompt content up to the end of block k (chained hashes). None: unique
        # content that no other request shares, so nothing to look up in a prefix cache. The workloads
        # give an array('Q') (8 bytes a key: distsim.workload.keys); any sequence of hashables will do.
        self.block_hashes = block_hashes
        self.ttft_slo_ms = ttft_slo_ms
        self.tpot_slo_ms = tpot_slo_ms
        self.priority = priority
        self.adapter = -1  # the LoRA adapter it names (distsim.workload.adapters); -1: the base model
        self.status = Status.UNFINISHED
        self.instance = -1
        self.prefill_instance = -1
        self.route_us = -1  # the router's decision (admitted and routed; under P/D both instances at once)
        self.enqueue_us = -1  # it reached its (prefill) instance's queue: after the decision latency and ingestion
        self.first_scheduled_us = -1
        self.first_token_us = -1
        self.completion_us = -1
        self.last_token_us = -1
        self.generated = 0  # output tokens emitted so far (while decoding, updated only at its end)
        self.cached_tokens = 0  # prompt tokens served from the prefix cache at first admission
        self.preemptions = 0
        # The instance serving it keeps its per-sequence state here (distsim.instance.sequence.SeqState:
        # phase, computed tokens, blocks); None until an instance takes it. Only that instance reads it.
        self.seq = None

    # The request type (workload.mix): an LLM request is a plain Request, which reads these class defaults,
    # so LLM-only runs pay nothing for types; a non-LLM request is a TypedRequest with its own values.
    rtype = "llm"
    items = 0  # batch items it adds to a runtime's batch (images, audio windows)
    size = 0.0  # its per-item size in its type's unit (image side in pixels, audio seconds)
    latency_slo_ms = None  # its type's latency SLO (None: none)

    def __repr__(self) -> str:
        return (
            f"Request(id={self.request_id}, t={self.arrival_us}us, in={self.prompt_tokens}, "
            f"out={self.output_tokens}, status={self.status.name})"
        )


class TypedRequest(Request):
    """A non-LLM request (vision, ASR, any named type of workload.mix), served by a batching runtime
    (distsim.runtime). Its slots shadow Request's class defaults; its token fields stay 0."""

    __slots__ = ("rtype", "items", "size", "latency_slo_ms")

    def __repr__(self) -> str:
        return f"TypedRequest(id={self.request_id}, type={self.rtype}, t={self.arrival_us}us, items={self.items}, " \
            f"size={self.size:g}, status={self.status.name})"


def new_typed_request(
    request_id: int, arrival_us: int, rtype: str, items: int, size: float, latency_slo_ms: float | None, tenant: int = 0
) -> TypedRequest:
    """A non-LLM request of type ``rtype``: no tokens, ``items`` batch items of ``size`` each."""
    req = _new(TypedRequest)
    _init(req, request_id, arrival_us, 0, 0, tenant, rtype, -1, None, None, None, 0)
    req.rtype, req.items, req.size, req.latency_slo_ms = rtype, items, size, latency_slo_ms
    return req



_new = object.__new__
_init = Request.__init__


def new_request(
    request_id: int,
    arrival_us: int,
    prompt_tokens: int,
    output_tokens: int,
    tenant: int,
    slo_class: str,
    session_id: int,
    block_hashes: Sequence[Hashable] | None,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    priority: int,
) -> Request:
    """``Request(...)`` with every workload field given, in order: the same object at about half the cost
    (a class call passes its arguments through a tuple and a dict; this calls ``__init__`` directly).
    Workload generators call it once per request."""
    req = _new(Request)
    _init(req, request_id, arrival_us, prompt_tokens, output_tokens, tenant, slo_class, session_id, block_hashes,
          ttft_slo_ms, tpot_slo_ms, priority)  # fmt: skip
    return req
