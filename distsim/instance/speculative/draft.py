"""What proposing the drafts costs in each engine step.

vLLM's proposers (vllm/v1/spec_decode/eagle.py, draft_model.py) run after the target's forward pass, in the
same engine step: the first draft pass reads every token the step computed (prompt chunks included, so the
draft's own KV stays complete), then k - 1 passes of one token per drafting sequence. Each pass is priced as
a step of the draft's own latency model with the host terms at zero (the engine step pays its host work once,
in the target's step time): the draft model from the catalog (method draft_model), or a one-layer head of the
target's own architecture (eagle, mtp: an EAGLE head is one decoder layer over the target's features and
shares its embedding and LM head; DeepSeek-V3's MTP module is one transformer block). ``head_cost_us`` sets
a fixed time per pass instead (the only choice under the linear latency model, which has no architecture).
The n-gram proposer matches the prompt on the host (vllm/v1/spec_decode/ngram_proposer.py): no GPU time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distsim.instance.latency.base import LatencyModel


@dataclass(frozen=True)
class DraftCost:
    """The draft's time per step: a latency model per pass, or a fixed time per pass, or nothing."""

    model: LatencyModel | None = None  # the draft's (or head's) step model, host terms at zero
    pass_us: float = 0.0  # with no model: the fixed time of one draft pass
    label: str = "none"  # what prices it, for messages and the docs

    def step_us(
        self, shape: tuple[int, int, int, int, int, int], seqs_by_pass: Sequence[int], ctx_by_pass: Sequence[int]
    ) -> int:
        """The drafting time of one step: the first pass over the step's ``shape`` (its StepShape fields),
        then pass j = 2, 3, .. over ``seqs_by_pass[j-2]`` sequences attending ``ctx_by_pass[j-2]`` tokens."""
        passes = 1 + len(seqs_by_pass)
        model = self.model
        if model is None:
            return round(self.pass_us * passes)
        total = model.step_time(*shape)
        for seqs, ctx in zip(seqs_by_pass, ctx_by_pass):
            if seqs:
                total += model.step_time(0, 0, 0, seqs, ctx, 0)
        return total
