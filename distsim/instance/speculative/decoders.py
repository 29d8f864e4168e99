"""The decoding sequences of a speculating engine, each with its own token clock.

The plain engine's :class:`~distsim.instance.decode_set.DecodeSet` never touches a decoder per step: every
decoder gains one token a step, so its count, KV boundaries and finish step follow from the engine's step
index. Under speculation a sequence gains 1 to k + 1 tokens a step, drawn per sequence, so that arithmetic
is gone: this set keeps each decoder's own count (``req.generated``) and slots (``seq.alloc_tokens``), and
touches every decoder once per step, as vLLM's scheduler does. It answers the doors of the decode set that
the rest of the engine uses (``count``, ``join``, ``leave``, ``private_blocks``, an empty ``finish_heap``),
and keeps ``seq.decode_offset = generated - step index`` so readers of that identity (the outlook,
``leave_running``) stay right.

KV (vLLM's ``allocate_slots`` with the drafts as lookahead slots): between steps a decoder holds the slots
of its computed tokens (prompt + generated - 1); scheduling a verify step of d drafts takes the slots for
d + 1 more; after verification the slots of the rejected drafts are freed and the accepted kept. A decoder
drafts at most its remaining output less one, so its slots never pass its last token (vLLM drops tokens
past max_tokens: the same output, fewer slots), and the draft lengths fit the step's token budget in
join order (vLLM's scheduler trims spec tokens that do not fit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from distsim.errors import SimulationError
from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.kv_cache import KVCache
    from distsim.instance.speculative.settings import SpeculativeSettings
    from distsim.request import Request

DECODE = Phase.DECODE


def blocks(tokens: int, bs: int) -> int:
    return -(-tokens // bs)


class SpeculativeDecoders:
    """The decoders in join order, this step's draft lengths, and counters of drafts and acceptances."""

    __slots__ = ("bs", "k", "acceptance", "draft", "rng", "count", "members", "finish_heap", "planned", "extra",
                 "shape_key", "steps", "drafted", "accepted", "emitted")  # fmt: skip

    def __init__(self, block_size: int, settings: SpeculativeSettings, rng: np.random.Generator):
        self.bs = block_size
        self.k = settings.k
        self.acceptance = settings.acceptance
        self.draft = settings.draft
        self.rng = rng  # the engine's own stream: draws never shift another subsystem's
        self.count = 0
        self.members: dict[int, Request] = {}
        self.finish_heap: list = []  # never filled: this set finishes its decoders itself (see advance)
        self.planned: list[tuple[Request, int]] = []  # this step's decoders and their draft lengths
        self.extra = 0  # the step's token budget left for drafts, while it is being scheduled
        self.shape_key: tuple[int, int] | int = 0  # the planned step's (tokens, sequences), for the serving tally
        self.steps = self.drafted = self.accepted = self.emitted = 0  # sequence-steps, drafts, accepted, tokens

    # ---- the decode set's doors ---------------------------------------------------------------------
    def join(self, req: Request, step: int) -> None:
        seq = req.seq
        seq.phase = DECODE
        seq.decode_offset = req.generated - step
        seq.decode_epoch += 1
        self.members[req.request_id] = req
        self.count += 1

    def leave(self, req: Request) -> None:
        del self.members[req.request_id]
        self.count -= 1
        req.seq.decode_epoch += 1

    def private_blocks(self, req: Request, step: int) -> int:
        """Blocks outside the prefix cache that ``req`` holds (its own count: the step does not matter)."""
        return req.seq.private_blocks

    # ---- scheduling a verify step -------------------------------------------------------------------
    def begin(self, max_tokens: int) -> None:
        """A new step is being scheduled: every decoder's own token first, drafts from what is left."""
        self.extra = max_tokens - self.count
        self.planned = []

    def claim(self, req: Request) -> tuple[int, int, int]:
        """``req``'s draft length this step, its tokens (drafts + 1) and the blocks those slots need."""
        d = self.k if self.extra >= self.k else max(self.extra, 0)
        left = req.output_tokens - req.generated
        if d >= left:
            d = left - 1
        self.extra -= d
        bs = self.bs
        return d, d + 1, blocks(req.prompt_tokens + req.generated + d, bs) - blocks(req.seq.alloc_tokens, bs)

    def take(self, kv: KVCache, req: Request, d: int, nb: int) -> None:
        """Give ``req`` its slots for this step (the caller checked the blocks are there)."""
        seq = req.seq
        kv.allocate(nb)
        seq.private_blocks += nb
        seq.alloc_tokens = req.prompt_tokens + req.generated + d
        self.planned.append((req, d))

    def claim_all(self) -> tuple[list[tuple[Request, int, int]], int, int]:
        """Every decoder's claim in join order, the blocks they need and the tokens they take."""
        claims = []
        need = tokens = 0
        for req in self.members.values():
            d, n, nb = self.claim(req)
            claims.append((req, d, nb))
            need += nb
            tokens += n
        return claims, need, tokens

    def shape(self) -> tuple[int, int, int, int, int, int, list[int], list[int]]:
        """The planned step's decoders as step-model fields: a sequence verifying d > 0 drafts is a chunk of
        d + 1 query tokens after its computed ones (attention over k + 1 queries, as vLLM runs it), each
        position a sampled row; one with none is a plain decode. Returns (tokens, attention pairs, KV tokens,
        sampled rows, plain decoders, their context) and, for the draft passes 2 .. k, the sequences drafting
        that far and their contexts."""
        tokens = pairs = kv = rows = d_seqs = d_ctx = 0
        k = self.k
        seqs_by = [0] * (k + 1)
        ctx_by = [0] * (k + 1)
        for req, d in self.planned:
            c0 = req.prompt_tokens + req.generated - 1
            seqs_by[d] += 1
            ctx_by[d] += c0
            if d:
                n = d + 1
                tokens += n
                pairs += n * c0 + n * (n + 1) // 2
                kv += c0 + n
                rows += n
            else:
                d_seqs += 1
                d_ctx += c0 + 1
        passes_seqs, passes_ctx = [], []
        at_least = ctx_at_least = 0
        for j in range(k, 1, -1):  # pass j proposes draft j of the sequences drafting at least j
            at_least += seqs_by[j]
            ctx_at_least += ctx_by[j]
            passes_seqs.append(at_least)
            passes_ctx.append(ctx_at_least + at_least * j)
        passes_seqs.reverse()
        passes_ctx.reverse()
        return tokens, pairs, kv, rows, d_seqs, d_ctx, passes_seqs, passes_ctx

    # ---- applying a verify step ---------------------------------------------------------------------
    def advance(self, kv: KVCache, step: int) -> tuple[int, list[Request]]:
        """Verify the planned drafts: each decoder gains its drawn tokens, frees the rejected drafts' slots;
        returns the tokens out and the decoders that reached their output length (left the set).
        ``step``: the engine's step index after the step (INV-31 is checked here)."""
        planned = self.planned
        if not planned:
            return 0, []
        self.planned = []
        drafts = np.fromiter((d for _, d in planned), dtype=np.int64, count=len(planned))
        out = self.acceptance.draw(self.rng, drafts).tolist()
        bs = self.bs
        done = []
        total = 0
        for (req, d), a in zip(planned, out):
            seq = req.seq
            g = req.generated + a
            if a > d + 1 or g > req.output_tokens:
                raise SimulationError(
                    f"INV-31: request {req.request_id}: {a} tokens from {d} drafts, {g} of {req.output_tokens}"
                )
            req.generated = g
            total += a
            kept = req.prompt_tokens + g - 1
            excess = blocks(seq.alloc_tokens, bs) - blocks(kept, bs)
            if excess:
                kv.release((), excess)
                seq.private_blocks -= excess
            seq.alloc_tokens = kept
            self.drafted += d
            self.accepted += a - 1
            if g == req.output_tokens:
                self.leave(req)
                done.append(req)
            else:
                seq.decode_offset = g - step
        self.steps += len(planned)
        self.emitted += total
        return total, done
