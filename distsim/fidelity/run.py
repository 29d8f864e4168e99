"""A measured serving run, whatever tool produced it: requests with their measured times, the engine
settings, and (when the tool recorded it) a per-second running/waiting series.

Readers (:mod:`distsim.fidelity.bench_format`, :mod:`distsim.fidelity.csv_format`) turn files into a
:class:`MeasuredRun` on one clock: milliseconds since the first request's arrival. The latency columns
follow the benchmarks' definitions, which are also the simulator's (requests.parquet):
TTFT = first token - arrival, E2E = last token - arrival, TPOT = (last - first) / (output tokens - 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from distsim.request import Request

REQUEST_COLUMNS = (
    "request_id",  # 0..n-1 in arrival order (what the simulator needs)
    "source_id",  # the id in the run's own file
    "arrival_ms",
    "input_tokens",
    "output_tokens",
    "scheduled_ms",  # first scheduled by the engine (NaN when the run does not record it)
    "first_token_ms",
    "completion_ms",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
)


@dataclass(frozen=True)
class EngineSettings:
    """The engine settings a run was measured with; None = not recorded (the config's value is used)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    total_kv_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    scheduler_reserve_full_isl: bool | None = None
    async_scheduling: bool | None = None  # vLLM's --async-scheduling
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None  # engine replicas behind one API server (vLLM --data-parallel-size)
    enable_expert_parallel: bool | None = None  # MoE experts spread over the tp x dp GPUs
    cpu_kv_blocks: int | None = None  # vLLM's CPU KV offload tier, in blocks

    def overrides(self) -> dict[str, object]:
        """``cluster.engine.*`` values for the recorded settings."""
        return {f"cluster.engine.{k}": v for k, v in self.__dict__.items() if v is not None}


@dataclass
class MeasuredRun:
    """One measured run. ``requests`` has :data:`REQUEST_COLUMNS`; ``timeseries`` (optional) has
    ``t_s`` (seconds since the first arrival), ``running`` and ``waiting``."""

    name: str
    path: Path
    requests: pd.DataFrame
    model: str | None = None
    hardware: str | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)
    timeseries: pd.DataFrame | None = None
    source_format: str = ""
    source_file: Path | None = None  # the requests file (provenance: profiles record its hash)
    max_concurrency: int | None = None  # the client's cap on requests out (vllm bench serve --max-concurrency); None: open loop
    request_rate_rps: float | None = None  # with a cap, the rate the client paced its sends at (None or inf: none)
    # the sampling path the run's client asked for, when its format says (a cluster.latency.serving.sampler
    # value: "greedy" for a client that sends temperature 0); None: the model's own generation defaults
    sampler: str | None = None

    @property
    def id(self) -> str:
        """The run's name: what fit tables and reports call it (as a suite run's id)."""
        return self.name

    @property
    def model_name(self) -> str:
        """The model, for weighing runs by model in a fit (the run's name when it names none)."""
        return self.model or self.name

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def load_mode(self) -> str:
        """How the client sent the requests: ``open`` (each at its arrival time), ``closed`` (at most
        ``max_concurrency`` out, the next sent as one returns) or ``mixed`` (closed, and paced at a rate)."""
        if self.max_concurrency is None:
            return "open"
        rate = self.request_rate_rps
        return "closed" if rate is None or math.isinf(rate) else "mixed"

    def to_source(self, seed: int) -> Iterable[Request]:
        """The requests as the client sent them: open loop, their arrival times; closed loop, the same
        order and lengths sent by ``max_concurrency`` clients (mixed: none before its measured send time)."""
        requests = self.to_requests()
        if self.max_concurrency is None:
            return requests
        from distsim.workload.clients import ClientSettings, ClosedLoopSource, Stage

        mode = "closed" if self.load_mode == "closed" else "mixed"
        return ClosedLoopSource(requests, ClientSettings((Stage(0, self.max_concurrency),), None, mode, 0, None), seed)

    def to_requests(self) -> list[Request]:
        """Fresh simulator requests (same arrivals in integer microseconds, same lengths). New objects on
        every call: a simulation writes its runtime fields into them."""
        arrival_us = np.rint(self.requests["arrival_ms"].to_numpy() * 1000.0).astype(np.int64)
        ins = self.requests["input_tokens"].to_numpy()
        outs = self.requests["output_tokens"].to_numpy()
        return [Request(i, int(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrival_us, ins, outs))]


def request_table(
    source_id: list,
    arrival_ms: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    scheduled_ms: np.ndarray,
    first_token_ms: np.ndarray,
    completion_ms: np.ndarray,
) -> pd.DataFrame:
    """The request table in arrival order with the latency columns derived by the shared definitions."""
    order = np.argsort(np.asarray(arrival_ms, dtype=np.float64), kind="stable")
    arrival = np.asarray(arrival_ms, dtype=np.float64)[order]
    first = np.asarray(first_token_ms, dtype=np.float64)[order]
    last = np.asarray(completion_ms, dtype=np.float64)[order]
    outs = np.asarray(output_tokens, dtype=np.int64)[order]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outs > 1, (last - first) / (outs - 1), np.nan)
    return pd.DataFrame(
        {
            "request_id": np.arange(len(order), dtype=np.int64),
            "source_id": [source_id[i] for i in order],
            "arrival_ms": arrival,
            "input_tokens": np.asarray(input_tokens, dtype=np.int64)[order],
            "output_tokens": outs,
            "scheduled_ms": np.asarray(scheduled_ms, dtype=np.float64)[order],
            "first_token_ms": first,
            "completion_ms": last,
            "ttft_ms": first - arrival,
            "tpot_ms": tpot,
            "e2e_ms": last - arrival,
        }
    )
