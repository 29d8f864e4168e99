"""Where a request stands on the instance that serves it.

An instance keeps the phase in its own per-sequence state (:mod:`distsim.instance.sequence`), not on
the request: under P/D one request passes through two instances, and each keeps its own view.
"""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    """A request's phase on one instance. The transitions:

    WAITING -> PREFILL -> DECODE -> DONE on a mixed instance; PREFILL -> DONE for a one-token answer;
    PREFILL or DECODE -> WAITING on a preemption by recompute (back to the front of the queue);
    PREFILL -> HANDED_OFF on a P/D prefill instance, whose decode instance then starts the request at
    WAITING (blocks reserved, KV in transit, landed) and goes on from DECODE.
    """

    WAITING = 0  # queued, loading from the CPU KV tier, or (P/D decode side) waiting for its KV or a slot
    PREFILL = 1  # running, its prompt (or a recompute) not yet fully computed: takes a chunk per step
    DECODE = 2  # running, one token per step; counted in the instance's decode set, not touched per step
    DONE = 3  # finished here: completed, or refused on arrival (too long, can never fit)
    HANDED_OFF = 4  # P/D prefill side: prompt computed, KV kept until its decode instance has it
