"""The LoRA config nodes: the engine's (``cluster.engine.lora``, vLLM's LoRA flags) and the workload's
(``workload.lora``: the adapter catalog and which adapter each request names). Both are off by default
(``max_loras`` null, ``adapters`` 0), so every run that does not set them is unchanged."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoraEngineConfig:
    """vLLM's ``--enable-lora`` with ``--max-loras``, ``--max-lora-rank`` and ``--max-cpu-loras``
    (distsim/lora). Off while ``max_loras`` is null."""

    max_loras: int | None = None  # adapters one step may batch = the engine's GPU adapter slots (vLLM's default 1); null: LoRA off
    max_lora_rank: int = 16  # the rank every GPU slot is allocated at (vLLM's default 16); an adapter's rank must not exceed it
    max_cpu_loras: int | None = None  # adapters cached in host memory, LRU (null: max_loras, vLLM's default); >= max_loras
    disk_read_gbps: float | None = None  # GB/s reading an adapter that is not in the CPU cache (your storage's; required with LoRA on)


@dataclass
class LoraWorkloadConfig:
    """The adapter catalog and each request's adapter (distsim.workload.adapters): adapter i of ``adapters``
    is named with probability proportional to (i + 1) ** -zipf_s, by the requests that name one."""

    adapters: int = 0  # adapters in the catalog (0: no request names one)
    rank: int = 16  # every adapter's rank (ranks overrides it)
    ranks: list[int] | None = None  # one rank per adapter
    zipf_s: float = 1.0  # popularity skew: 0 uniform
    base_share: float = 0.0  # of requests that name no adapter (the base model)
