"""Queue depth: fewer waiting requests score higher (min-max normalised, as llm-d's queue scorer)."""

from distsim.policies.scorers.base import SCORERS, Scorer, inverse_minmax


@SCORERS.register("queue_depth")
class QueueDepthScorer(Scorer):
    reads_signals = True

    def score(self, req, view):
        return inverse_minmax(view.queue_depth() + view.in_transit())
