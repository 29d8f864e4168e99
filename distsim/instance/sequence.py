"""An instance's own bookkeeping for one request it serves (vLLM's per-sequence state).

It hangs off ``Request.seq`` so the hot path reaches it with one attribute load, and it belongs to the
instance that created it: under P/D the decode instance starts a fresh one when the request arrives.
Nothing outside :mod:`distsim.instance` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distsim.instance.phase import Phase


@dataclass(slots=True, eq=False)
class SeqState:
    """Per-request scratch state of the serving instance.

    While decoding, the request is counted in the instance's decode set and its token count is not
    written per step: ``generated = decode_offset + steps completed`` (see
    :mod:`distsim.instance.decode_set`).
    """

    phase: Phase = Phase.WAITING
    computed: int = 0  # tokens whose KV is computed (vLLM's num_computed_tokens)
    alloc_tokens: int = 0  # tokens with KV slots allocated (prefill bookkeeping)
    private_blocks: int = 0  # blocks held outside the prefix cache (prefill bookkeeping)
    shared_blocks: int = 0  # cached blocks it holds a reference on
    runs: list = field(default_factory=list)  # those blocks as the prefix cache's runs (kv_cache.py)
    hashed_blocks: int = 0  # prompt blocks already offered to the prefix cache
    cpu_offered: int = 0  # prompt blocks already offered to the CPU KV tier (kept over a preemption, as vLLM)
    decode_offset: int = 0  # decode phase: generated = decode_offset + the instance's step index
    decode_epoch: int = -1  # bumps on every join and leave of the decode set: older finish entries are stale
    prefilled: int = 0  # prompt tokens computed here, recomputes included (kept over a preemption): work done
    enqueued_us: int = 0  # when it joined the waiting queue (async scheduling: visible to the scheduler from then)

    def clear(self, phase: Phase) -> None:
        """Forget the blocks and the computed KV (they were released or passed on) and enter ``phase``.
        The decode epoch stays, so finish entries of an earlier decode stay stale."""
        self.phase = phase
        self.shared_blocks = 0
        self.runs = []
        self.private_blocks = 0
        self.alloc_tokens = 0
        self.computed = 0
        self.hashed_blocks = 0
