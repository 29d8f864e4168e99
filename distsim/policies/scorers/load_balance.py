"""Load balance: fewer outstanding requests (the router's own count, always current) score higher."""

from distsim.policies.scorers.base import SCORERS, Scorer, inverse_minmax


@SCORERS.register("load_balance")
class LoadBalanceScorer(Scorer):
    def score(self, req, view):
        return inverse_minmax(view.outstanding().astype(float))
