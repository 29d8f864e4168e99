"""What is left to do on an engine, exactly, at an instant: for a clairvoyant reference router only.

:func:`outlook` lists every request an engine holds with the prompt tokens it still has to compute and the
output tokens it still has to generate, decoders counted to the step that has ended by then (a fast-forwarded
run's steps included, without applying them); :func:`prefix_hit` is the prompt tokens a new request would
find in the engine's prefix cache now. Both only read. The output lengths are the true ones, which no
deployable router knows (INV-9): distsim.policies.oracle, a clairvoyant greedy heuristic kept as a
reference, is the only reader.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.instance import Instance
    from distsim.request import Request

DECODE = Phase.DECODE


def steps_done(inst: Instance, now: int) -> int:
    """The engine's steps that have ended by ``now`` (a run in flight: its steps ended so far)."""
    plan = inst.plan
    if plan.steps and plan.ends_us is not None:
        return plan.start + bisect_right(plan.ends_us, now, 0, plan.steps)
    return inst.step_index


def outlook(inst: Instance, now: int) -> list[tuple[int, int, int]]:
    """(prompt tokens still to compute, output tokens still to generate, tokens whose KV is computed) of each
    request on the engine: running ones first in admission order, then the waiting queue in its order (a
    waiting prompt counted from what the prefix cache holds of it now)."""
    c = steps_done(inst, now)
    out = []
    for req in inst.running.values():
        seq = req.seq
        if seq.phase is DECODE:
            generated = min(seq.decode_offset + c, req.output_tokens)
            out.append((0, req.output_tokens - generated, req.prompt_tokens + generated))
        else:
            out.append((max(req.prompt_tokens + req.generated - seq.computed, 0), req.output_tokens - req.generated,
                        seq.computed))
    for req in inst.landed:  # P/D decode side: the KV is here, a sequence slot is not yet
        out.append((0, req.output_tokens - req.generated, req.prompt_tokens + req.generated))
    for req in (*inst.waiting, *inst.loading.values()):
        hit = prefix_hit(inst, req)
        out.append((req.prompt_tokens + req.generated - hit, req.output_tokens - req.generated, hit))
    return out


def prefix_hit(inst: Instance, req: Request) -> int:
    """Prompt tokens of ``req`` the engine's prefix cache holds now (as its admission would find them)."""
    if not inst.caching or not req.block_hashes:
        return 0
    hits, _ = inst.kv.match_prefix(req.block_hashes, (req.prompt_tokens - 1) // inst.bs)
    return hits * inst.bs
