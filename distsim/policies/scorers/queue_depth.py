"""Queue depth: fewer waiting requests score higher (min-max normalised, as llm-d's queue scorer)."""

from distsim.policies.scorers.base import SCORERS, Scorer, as_vector, inverse_minmax_or_one


@SCORERS.register("queue_depth")
class QueueDepthScorer(Scorer):
    reads_signals = True

    def score(self, req, view):
        return as_vector(self.bound(req, view)[0], view.n)

    def bound(self, req, view):
        return inverse_minmax_or_one(view.queue_depth() + view.in_transit()), None
