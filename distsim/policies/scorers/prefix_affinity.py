"""Prefix affinity: the share of the request's prompt blocks the instance holds (router's index).
Instances with more than ``load_guard`` outstanding requests above the least loaded score 0, so a
shared prefix cannot pull all traffic onto one warm instance (the herding that llm-d-like defaults
show when most requests share a system prompt)."""

from distsim.policies.scorers.base import SCORERS, Scorer, as_vector, guard_load


@SCORERS.register("prefix_affinity")
class PrefixAffinityScorer(Scorer):
    def __init__(self, params):
        super().__init__(params)
        self.guard = float(params.load_guard)

    def score(self, req, view):
        return as_vector(self.bound(req, view)[0], view.n)

    def bound(self, req, view):
        if not req.block_hashes:
            return 0.0, None
        match = view.prefix_match(req)
        if match[match.argmax()] == 0:
            return 0.0, None  # nobody holds the first block: every share is 0
        return guard_load(match / len(req.block_hashes), view, self.guard), None
