"""The speculating engine: the plain engine's step cycle with verify steps, chosen when the engine is built.

Why a mixin picked at construction (as distsim.instance.observed): an engine without speculation is the plain
:class:`~distsim.instance.instance.Instance` and its hot path is untouched; a speculating one overrides the
few places where a decoder's one token per step was assumed: scheduling the running requests (each decoder
claims 1 + d tokens of the budget and the slots for them), pricing the step, and applying it (the
acceptance draw). Decoders are :class:`~distsim.instance.speculative.decoders.SpeculativeDecoders`, touched
once per step each, so runs of decode steps are not fast-forwarded: every step is planned on its own.

The step's time is the target's verify step through the configured latency model (each verifying sequence a
chunk of d + 1 query tokens over its context, as vLLM's attention runs it) plus the draft's passes
(distsim.instance.speculative.draft). CUDA-graph padding is the latency model's (roofline3's serving layer
pads a step's tokens to the captured sizes, which vLLM rounds to multiples of k + 1 under speculation).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from distsim.instance.scheduler import prefill_shape
from distsim.instance.speculative.decoders import SpeculativeDecoders

if TYPE_CHECKING:
    import numpy as np

    from distsim.instance.instance import Instance
    from distsim.request import Request


class SpeculativeEngine:
    """The speculative step cycle, mixed in before an Instance class (see :func:`speculative_class`)."""

    __slots__ = ()  # the state is the instance's; the decoders object holds what speculation adds

    def __init__(self, *args, rng: np.random.Generator, **kwargs):
        super().__init__(*args, **kwargs)
        self.fast_forward = False  # a decoder's tokens per step are drawn: no run of identical steps
        self.decoders = SpeculativeDecoders(self.bs, self.params.speculative, rng)

    def _plan_next(self, now: int) -> None:
        """Schedule the next step: the running requests (decoders with their drafts), then admission."""
        dec = self.decoders
        chunks, budget, preempted = self._schedule_running(now, 0)
        if (
            (self.waiting or self.landed or self.awaiting_blocks)
            and (not preempted or not (chunks or dec.count))
            and budget > 0
            and len(self.running) < self.max_seqs
        ):
            self._admit(now, budget, 0, chunks)  # the decoders' blocks are taken already
        if not chunks and not dec.count:
            self._go_idle()
        else:
            self.late_waits = False
            self._plan_step(now, self.step_index, chunks, 0)

    def _schedule_running(self, now: int, need_dec: int) -> tuple[list[tuple[Request, int]], int, bool]:
        """The decoders' tokens and slots (drafts included), then the prefilling requests' chunks while the
        budget lasts; with blocks short, vLLM's running loop with preemption."""
        dec = self.decoders
        dec.begin(self.max_tokens)
        claims, need, tokens = dec.claim_all()
        budget = self.max_tokens - tokens
        chunks: list[tuple[Request, int]] = []
        bs = self.bs
        for req in self.prefilling:
            if budget <= 0:
                break
            seq = req.seq
            n = min(req.prompt_tokens + req.generated - seq.computed, budget)
            chunks.append((req, n))
            need += -(-(seq.alloc_tokens + n) // bs) - -(-seq.alloc_tokens // bs)
            budget -= n
        if need > self.kv.available():
            dec.begin(self.max_tokens)
            chunks, budget = self._schedule_running_with_preemption(now)
            return chunks, budget, True
        kv = self.kv
        for req, d, nb in claims:
            dec.take(kv, req, d, nb)
        for req, n in chunks:
            self._allocate_chunk(req.seq, n)
        return chunks, budget, False

    def _decoder_claim(self, req: Request, c: int) -> tuple[int, int]:
        _, n, nb = self.decoders.claim(req)
        return n, nb

    def _take_decoder(self, req: Request, n: int, nb: int) -> None:
        self.decoders.take(self.kv, req, n - 1, nb)

    def _plan_step(self, now: int, c: int, chunks: list[tuple[Request, int]], need_dec: int) -> None:
        """Plan one step: the prefill chunks, the decoders' verify chunks, and the draft's passes."""
        pf_tokens, pf_pairs, pf_kv = prefill_shape(chunks)
        dec = self.decoders
        v_tokens, v_pairs, v_kv, rows, d_seqs, d_ctx, pass_seqs, pass_ctx = dec.shape()
        shape = (pf_tokens + v_tokens, pf_pairs + v_pairs, pf_kv + v_kv, d_seqs, d_ctx, len(chunks) + rows)
        dur = self.latency.step_time(*shape) + dec.draft.step_us(shape, pass_seqs, pass_ctx)
        tokens, seqs = shape[0] + d_seqs, shape[5] + d_seqs
        dec.shape_key = (tokens, seqs) if tokens != seqs else tokens
        self.plan.step(c, now, dec.count, chunks, dur)
        self.version = version = self.version + 1
        self.loop.schedule(now + dur, self.priority, self._event, version)

    def _apply_plan(self, now: int) -> None:
        """Apply the step as the plain engine does (counters, prefill chunks), then verify the drafts:
        each decoder's drawn tokens, its rejected slots freed, the finished released."""
        plan = self.plan
        b = plan.decoders
        shapes = self.stats.serving_steps
        if shapes is not None and b:  # the plain engine tallies the step as b one-token decoders
            chunks = plan.chunks
            plain = (b + sum(n for _, n in chunks), b + len(chunks)) if chunks else b
        super()._apply_plan(now)
        if shapes is not None and b:
            left = shapes[plain] - 1
            if left:
                shapes[plain] = left
            else:
                del shapes[plain]
            key = self.decoders.shape_key
            shapes[key] = shapes.get(key, 0) + 1
        total, done = self.decoders.advance(self.kv, self.step_index)
        self.stats.decode_tokens += total - b
        for req in done:
            self._finish(req, now, req.seq.private_blocks)


@cache
def speculative_class(base: type[Instance]) -> type[Instance]:
    """``base`` (Instance, or a subclass such as ObservedInstance) with the speculative step cycle."""
    return type(f"Speculative{base.__name__}", (SpeculativeEngine, base), {"__slots__": ()})
