"""Prefix affinity: the share of the request's prompt blocks the instance holds (router's index).
Instances with more than ``load_guard`` outstanding requests above the least loaded score 0, so a
shared prefix cannot pull all traffic onto one warm instance (the herding that llm-d-like defaults
show when most requests share a system prompt)."""

import numpy as np

from distsim.policies.scorers.base import SCORERS, Scorer


@SCORERS.register("prefix_affinity")
class PrefixAffinityScorer(Scorer):
    def __init__(self, params):
        super().__init__(params)
        self.guard = float(params.load_guard)

    def score(self, req, view) -> np.ndarray:
        if not req.block_hashes:
            return np.zeros(view.n)
        share = view.prefix_match(req) / len(req.block_hashes)
        outstanding = view.outstanding()
        share[outstanding > outstanding[outstanding.argmin()] + self.guard] = 0.0
        return share
