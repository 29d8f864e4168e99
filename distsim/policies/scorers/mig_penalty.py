"""MIG penalty: long prompts prefer instances with more compute (whole GPUs, larger MIG slices).

A prefill's time scales with the compute it gets, so a long prompt on a 1g slice waits about seven times
as long as on a whole GPU, while a short one barely notices. The scorer reads the static facts
``gpus`` and ``sm_fraction`` (distsim.cluster.build: the share of a GPU's SMs a slice has, 1 on whole
GPUs): an instance's size is gpus x sm_fraction, relative to the largest candidate. A request of
``prompt_tokens`` pays the penalty (1 - relative size) scaled by min(1, prompt_tokens / LONG_PROMPT_TOKENS):
a prompt of 2,048 tokens or more scores each instance by its relative size, a short one scores every
instance near 1. On a fleet of equal instances every score is 1, so the scorer changes nothing there.
Combine it with a load scorer (queue_depth, load_balance), or short requests would pile onto slices only
because nothing else is said about them.
"""

import numpy as np

from distsim.policies.scorers.base import SCORERS, Scorer

LONG_PROMPT_TOKENS = 2048  # a prompt this long pays the full penalty: one default chunked-prefill step


@SCORERS.register("mig_penalty")
class MigPenaltyScorer(Scorer):
    def score(self, req, view):
        size = view.facts["gpus"] * view.facts["sm_fraction"]
        relative = size / size.max()
        weight = min(1.0, req.prompt_tokens / LONG_PROMPT_TOKENS)
        return np.asarray(1.0 - (1.0 - relative) * weight, dtype=np.float64)
