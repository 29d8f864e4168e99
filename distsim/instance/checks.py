"""An instance's invariants (docs/invariants.md: INV-2, INV-3, INV-6, INV-7; its parts check their own), checked
after every event by the tests through :meth:`distsim.instance.instance.Instance.check_invariants`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distsim.errors import SimulationError
from distsim.instance.phase import Phase

if TYPE_CHECKING:
    from distsim.instance.engine import Engine

PREFILL, DECODE = Phase.PREFILL, Phase.DECODE


def check_instance(inst: Engine) -> None:
    """Raise SimulationError when a conservation law or limit is broken."""
    kv = inst.kv
    holders, private, decoders = count_holdings(inst)
    if decoders != inst.decoders.count:
        raise SimulationError(
            f"INV-7: instance {inst.index}: {decoders} running requests decode, the decode set counts"
            f" {inst.decoders.count}"
        )
    counted = kv.tally()  # walks the cache's tree: its running counts must agree
    if counted != (kv.referenced, kv.evictable, kv.references):
        raise SimulationError(
            f"INV-2: instance {inst.index}: the prefix cache counts (referenced, evictable, references)"
            f" {(kv.referenced, kv.evictable, kv.references)}, its tree holds {counted}"
        )
    referenced = kv.references
    if holders != referenced:
        raise SimulationError(
            f"INV-3: instance {inst.index}: {holders} block references held, cache counts {referenced}"
        )
    total = kv.available() + kv.referenced + private
    if total != kv.total:
        raise SimulationError(
            f"INV-2: instance {inst.index}: blocks not conserved: free {kv.free} + evictable {kv.evictable}"
            f" + cached {kv.referenced} + private {private} = {total} != {kv.total}"
        )
    if len(inst.running) > inst.max_seqs:
        raise SimulationError(f"INV-6: instance {inst.index}: {len(inst.running)} running > max_num_seqs")
    if kv.free < 0:
        raise SimulationError(f"INV-2: instance {inst.index}: negative free blocks")


def count_holdings(inst: Engine) -> tuple[int, int, int]:
    """Cache references and private blocks held by requests on ``inst`` (running, P/D held, reserved,
    landed, loading from the CPU tier), and the running requests that decode."""
    holders = private = decoders = 0
    for shared, held_private in inst.held.values():
        holders += sum(shared[1::2])  # runs: node, blocks, ...
        private += held_private
    for req in inst.reserved.values():
        private += req.seq.private_blocks
    for req in inst.landed:  # P/D: its KV has arrived and waits for a sequence slot
        private += req.seq.private_blocks
    for req in inst.loading.values():  # its GPU hits, and the blocks its CPU load fills
        holders += req.seq.shared_blocks
        private += req.seq.private_blocks
    # a decoder's next step has its blocks once it is planned
    planned = inst.step_index if inst.plan.steps else inst.step_index - 1
    for req in inst.running.values():
        seq = req.seq
        holders += seq.shared_blocks
        if seq.phase == DECODE:
            decoders += 1
            private += inst.decoders.private_blocks(req, planned)
        elif seq.phase == PREFILL:
            private += seq.private_blocks
        else:
            raise SimulationError(f"INV-7: request {req.request_id} running in phase {seq.phase.name}")
    return holders, private, decoders
